/*
 * confine.h - where an index may send larder to read.
 *
 * An index comes from anywhere, and a node daemon opens indexes for
 * other users, so the names in it are hostile: "/etc/shadow",
 * "../../home/alice/.ssh/id_rsa", "file:///proc/self/environ",
 * "http://169.254.169.254/...".  A shard name is taken only relative to
 * the index's base (the index's own directory, or the base a version 2
 * index records), without ".." components, schemes, or escapes a web
 * server would decode into them.  An opener that trusts an index as much
 * as its own files may lift that (trust_index).  Independently, an opener
 * may confine everything to a list of prefixes (the daemon's --allow):
 * the index's own location and every resolved shard must lie under one.
 * Pure string work except for realpath(3) of local paths (symbolic links
 * are followed, so a link inside an allowed directory cannot point out).
 */
#ifndef LARDER_CONFINE_H
#define LARDER_CONFINE_H

#include "index.h"

/*
 * The location of shard `shard` of the index `ix` found at `index_url`,
 * as a malloc'd string in *out.  Unless `trust`, the name must stay under
 * the index's base (see above) and a base recorded in an index read over
 * the network must not be local.  Returns 0, LARDER_EBADINDEX naming the
 * shard and what is wrong with its name, or -ENOMEM.
 */
LARDER__HIDDEN int larder__shard_location(const struct larder__index *ix, const char *index_url,
                                          uint64_t shard, bool trust, char **out);

/*
 * Why `name` may not be taken relative to a base (`remote`: a network
 * base, where a query, fragment or escaped separator counts too), as a
 * phrase ("a control character"), or NULL when it may.
 */
LARDER__HIDDEN const char *larder__unconfined_reason(const char *name, bool remote);

/*
 * Whether `location` (a path, file:// or network URL) lies under one of
 * the NULL-terminated `prefixes`, by whole path components, after
 * resolving "." and ".." (and, for local paths that exist, symbolic
 * links).  Returns 0, or LARDER_EDENIED with a message naming it.
 * `what` names the location in the message ("index", "shard 3").
 */
LARDER__HIDDEN int larder__allowed(const char *location, const char *const *prefixes,
                                   const char *what);

#endif
