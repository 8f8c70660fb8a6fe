/*
 * transport_ucx_log.c - what UCX says, and what the hub counted: UCX's
 * warnings and errors routed to larder's log (the host's callback; UCX's
 * default printed them on stdout, into a program's output), and the
 * hub's counters logged at its stop when LARDER_UCX_STATS is set.
 */
#include "transport_ucx_internal.h"

#ifdef LARDER_HAVE_UCX

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucs/debug/log_def.h>

_Thread_local bool larder__ucx_quiet_refusal;

/* UCX's warnings and errors go to larder's log (the host's callback), not
 * to UCX's default of stdout, where they mixed with a program's output;
 * the refusal make_ep expects is dropped.  Quieter levels are UCX's. */
static ucs_log_func_rc_t ucx_log(const char *file, unsigned line, const char *function,
                                 ucs_log_level_t level, const ucs_log_component_config_t *config,
                                 const char *format, va_list ap)
{
    (void)file, (void)line, (void)function, (void)config;
    if (level > UCS_LOG_LEVEL_WARN) return UCS_LOG_FUNC_RC_CONTINUE;
    if (larder__ucx_quiet_refusal) return UCS_LOG_FUNC_RC_STOP;
    char message[512];
    vsnprintf(message, sizeof message, format, ap);
    larder__log(LARDER_LOG_WARN, "UCX: %s", message);
    return UCS_LOG_FUNC_RC_STOP;
}

void larder__ucx_log_install(void)
{
    ucs_log_push_handler(ucx_log);
}

/* With LARDER_UCX_STATS set, the hub's counters at its stop (bench/peer.sh). */
void larder__ucx_log_stats(struct larder__ucx *hub)
{
    const char *want = getenv("LARDER_UCX_STATS");
    if (!want || !*want) return;
    larder__log(LARDER_LOG_WARN,
                "UCX stats: %llu progress passes, %llu sleeps on the event fd; %llu answers "
                "sent (%llu bytes, %llu with no thread waiting) from %llu mmaps; answers received "
                "%llu eager, %llu rendezvous (their pulls started %.1f us after arrival on "
                "average); READs that found the worker held: %llu",
                (unsigned long long)hub->stats.passes, (unsigned long long)hub->stats.sleeps,
                (unsigned long long)hub->stats.answers, (unsigned long long)hub->stats.answer_bytes,
                (unsigned long long)hub->stats.unwaited, (unsigned long long)hub->stats.maps,
                (unsigned long long)hub->stats.eager, (unsigned long long)hub->stats.rendezvous,
                hub->stats.rendezvous
                    ? (double)hub->stats.receive_wait_us / (double)hub->stats.rendezvous
                    : 0.0,
                (unsigned long long)hub->stats.reads_queued);
}

#endif
