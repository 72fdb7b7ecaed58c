/*
 * options: see options.h.
 */
#include "options.h"

#include <stdlib.h>

void sdnn_free_options(list *l)
{
    if (!l) return;
    for (node *n = l->front; n; n = n->next) {
        kvp_ *p = n->val;
        free(p->key);
        free(p);
    }
    free_list(l);
}
