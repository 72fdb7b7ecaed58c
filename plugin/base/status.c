/*
 * Error reporting for libscalednn: one process-wide message buffer, guarded by
 * a mutex because replica threads and the comm thread fail too.  The message
 * keeps the file:line of the place that raised it, so a user report points at
 * the code (the nccl-tests habit).
 */
#include "scalednn.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t g_err_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_err_msg[2048];

const char *sdnn_strerror(sdnn_status s)
{
    switch (s) {
    case SDNN_OK: return "success";
    case SDNN_ERR_INVALID: return "invalid input";
    case SDNN_ERR_IO: return "i/o error";
    case SDNN_ERR_NOMEM: return "out of memory";
    case SDNN_ERR_UNSUPPORTED: return "not supported";
    case SDNN_ERR_NONFINITE: return "non-finite value";
    case SDNN_ERR_SYSTEM: return "system call failed";
    case SDNN_ERR_COMM: return "communication failed";
    case SDNN_ERR_ABORTED: return "aborted";
    case SDNN_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *sdnn_last_error(void)
{
    /* The buffer is only rewritten on failure paths; callers read it after
     * the failing threads have stopped. */
    return g_err_msg;
}

void sdnn_clear_error(void)
{
    pthread_mutex_lock(&g_err_lock);
    g_err_msg[0] = '\0';
    pthread_mutex_unlock(&g_err_lock);
}

sdnn_status sdnn_set_error(sdnn_status s, const char *file, int line,
                           const char *fmt, ...)
{
    char body[1800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    pthread_mutex_lock(&g_err_lock);
    snprintf(g_err_msg, sizeof g_err_msg, "%s (%s:%d)", body, base, line);
    pthread_mutex_unlock(&g_err_lock);
    return s;
}
