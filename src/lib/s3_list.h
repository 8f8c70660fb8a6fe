/*
 * s3_list.h - the objects under an s3:// prefix (ListObjectsV2), so that
 * `larder index --files s3://bucket/prefix/` can index them without a
 * list of names.  The parser of one page of S3's answer does no I/O and
 * no allocation (it can be tested and fuzzed alone); the lister asks for
 * page after page through the signed HTTP source (s3.c, source_http.c).
 */
#ifndef LARDER_S3_LIST_H
#define LARDER_S3_LIST_H

#include "common.h"

/* One object: its key with the listed prefix taken off (not NUL-terminated),
 * its size, and a stamp of its version (XXH3-64 of its <ETag> and
 * <LastModified> as listed: another when the object is overwritten). */
typedef int (*larder__s3_object_fn)(void *userdata, const char *name, size_t length, uint64_t size,
                                    uint64_t stamp);

/*
 * One ListObjectsV2 answer, xml[0..length): each <Contents> element's
 * <Key> (XML character references decoded, into key[key_capacity]) with
 * `prefix` taken off, its <Size> and the stamp of its version, to `fn` (a key that is the prefix
 * itself, a folder marker, is left out)
 * (whose negative return stops the parse and is returned); *truncated
 * from <IsTruncated>, and <NextContinuationToken> (decoded) into
 * token[token_capacity].  0, or LARDER_EPROTOCOL naming what is wrong
 * (an element not closed, a key or token too long, a key not under the
 * prefix, a size that is not a number).
 */
LARDER__HIDDEN int larder__s3_list_parse(const char *xml, size_t length, const char *prefix,
                                         char *key, size_t key_capacity, larder__s3_object_fn fn,
                                         void *userdata, bool *truncated, char *token,
                                         size_t token_capacity);

/*
 * Every object under `url` ("s3://bucket/" or "s3://bucket/prefix/"),
 * page by page, to `fn` with its name relative to the URL.  0 or a
 * negative code naming the URL; LARDER_EPROTOCOL when the listing does
 * not advance (a token repeated, a page not after the keys before it,
 * page after page without a key) or passes 16 Mi keys (s3_list.c).
 */
LARDER__HIDDEN int larder__s3_list(const char *url, larder__s3_object_fn fn, void *userdata);

#endif
