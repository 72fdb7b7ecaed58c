/*
 * scalednn public API: status codes and error reporting shared by every module
 * of libscalednn and by the ./darknet front-end.
 *
 * The library never stops the program: every call that can fail returns an
 * sdnn_status, and the human-readable reason (with the file:line where it was
 * raised) is kept for sdnn_last_error().  Only main() decides to exit.
 */
#ifndef SCALEDNN_H
#define SCALEDNN_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sdnn_status {
    SDNN_OK = 0,
    SDNN_ERR_INVALID,     /* bad input: cfg key, argument, file content */
    SDNN_ERR_IO,          /* a file could not be read or written */
    SDNN_ERR_NOMEM,       /* an allocation failed */
    SDNN_ERR_UNSUPPORTED, /* valid request this build or network cannot do */
    SDNN_ERR_NONFINITE,   /* NaN or inf in a gradient */
    SDNN_ERR_SYSTEM,      /* threads, memfd and other OS calls */
    SDNN_ERR_COMM,        /* a collective failed */
    SDNN_ERR_ABORTED,     /* stopped because another part failed first */
    SDNN_ERR_INTERNAL     /* a broken invariant: a bug */
} sdnn_status;

/* Short name of a status ("invalid input", ...). */
const char *sdnn_strerror(sdnn_status s);

/* Detailed message of the most recent failure in this process, or "". */
const char *sdnn_last_error(void);

/* Forget the last message (tests use it between cases). */
void sdnn_clear_error(void);

/* For a thread whose failures another thread reports later (the simulated
 * device's stream workers): from now on its failures, and its own
 * sdnn_last_error(), use buf (len bytes, emptied now) instead of the
 * process-wide message, so a late failure there never overwrites the
 * message of the call that is being reported.  buf == NULL ends it. */
void sdnn_error_capture(char *buf, size_t len);

/* Record a failure; use through SDNN_ERROR so the message carries file:line. */
sdnn_status sdnn_set_error(sdnn_status s, const char *file, int line,
                           const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define SDNN_ERROR(status, ...) \
    sdnn_set_error((status), __FILE__, __LINE__, __VA_ARGS__)

/* Return the status up the stack when a call fails. */
#define SDNN_CHECK(call)                                   \
    do {                                                   \
        sdnn_status sdnn_check_s_ = (call);                \
        if (sdnn_check_s_ != SDNN_OK) return sdnn_check_s_; \
    } while (0)

/* Jump to a cleanup label with the status stored in `st` on failure. */
#define SDNN_CHECKGOTO(call, st, label) \
    do {                                \
        (st) = (call);                  \
        if ((st) != SDNN_OK) goto label; \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
