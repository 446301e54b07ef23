/*
 * cnx/log.h - logging to stderr and progress bars for long work.
 *
 * Log lines are "<RFC 3339 UTC time> <level> <component>: <message>", one
 * per call, written with a single write so lines from threads never
 * interleave. The level comes from cnx_log_set_level() or the CNX_LOG
 * environment variable (error, warn, info, debug; default info).
 * Progress bars draw on stderr when it is a terminal, and otherwise print a
 * plain line at most every 10% so that CI logs stay short.
 */
#ifndef CNX_LOG_H
#define CNX_LOG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cnx_log_level {
    CNX_LOG_ERROR = 0,
    CNX_LOG_WARN = 1,
    CNX_LOG_INFO = 2,
    CNX_LOG_DEBUG = 3,
} cnx_log_level;

void cnx_log_set_level(cnx_log_level level);
cnx_log_level cnx_log_get_level(void);
void cnx_log(cnx_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CNX_ERROR(comp, ...) cnx_log(CNX_LOG_ERROR, comp, __VA_ARGS__)
#define CNX_WARN(comp, ...) cnx_log(CNX_LOG_WARN, comp, __VA_ARGS__)
#define CNX_INFO(comp, ...) cnx_log(CNX_LOG_INFO, comp, __VA_ARGS__)
#define CNX_DEBUG(comp, ...) cnx_log(CNX_LOG_DEBUG, comp, __VA_ARGS__)

typedef struct cnx_progress cnx_progress;

/**
 * Start a progress bar for total units of work.
 * @param quiet  1 to draw nothing (the calls stay valid)
 * @return a bar, or NULL if out of memory (all calls accept NULL)
 */
cnx_progress *cnx_progress_start(const char *label, int64_t total, int quiet);
/** Report done units (monotonic; thread-safe). */
void cnx_progress_update(cnx_progress *bar, int64_t done);
/** Finish the line (drawn at 100%) and free the bar. Accepts NULL. */
void cnx_progress_finish(cnx_progress *bar);
/** End the bar where it stands, after a failure, and free it. Accepts NULL. */
void cnx_progress_abort(cnx_progress *bar);

/** Monotonic clock, seconds. */
double cnx_now(void);

#ifdef __cplusplus
}
#endif
#endif
