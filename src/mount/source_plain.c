/*
 * source_plain.c - an index, or plain files listed at mount time
 * (source_plain.h).
 */
#include "source_plain.h"

#include "common.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct larder__plain {
    char dir[PATH_MAX];        /* the private directory */
    char index[PATH_MAX + 16]; /* dir/index.larder */
};

static bool is_plain(const char *source)
{
    struct stat st;
    if (strncmp(source, "s3://", 5) == 0) return source[strlen(source) - 1] == '/';
    if (strstr(source, "://")) return false;
    return stat(source, &st) == 0 && S_ISDIR(st.st_mode);
}

int larder__plain_open(struct larder__plain **out, larder_dataset **dataset, const char *source,
                       larder_open_options *options, bool plain)
{
    *out = NULL, *dataset = NULL;
    if (!plain && !is_plain(source)) return larder_open(dataset, source, options);
    if (strncmp(source, "http://", 7) == 0 || strncmp(source, "https://", 8) == 0)
        return larder__fail(LARDER_EUNSUPPORTED,
                            "an http(s) prefix cannot be listed: index its files first (larder "
                            "index --files ROOT --files-from LIST) and mount the index");
    struct larder__plain *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0]) tmp = "/tmp";
    snprintf(p->dir, sizeof p->dir, "%s/larder-mount-XXXXXX", tmp);
    if (!mkdtemp(p->dir)) {
        int rc = larder__fail(-errno, "%s: %s", p->dir, strerror(errno));
        free(p);
        return rc;
    }
    /* a node daemon, perhaps another user, opens the index too */
    const char *socket = options->daemon_socket ? options->daemon_socket : getenv("LARDER_SOCKET");
    if (socket && socket[0]) chmod(p->dir, 0755);
    snprintf(p->index, sizeof p->index, "%s/index.larder", p->dir);
    larder_index_files_options io = {.struct_size = sizeof io, .listing_only = 1};
    int rc = larder_index_files(source, p->index, &io, NULL);
    /* this index is our own, made just now from the listing: the one
     * unchecked index an opener may take */
    larder_open_options own = *options;
    own.version = LARDER_OPEN_OPTIONS_VERSION;
    own.allow_unchecked = 1;
    if (rc == 0) rc = larder_open(dataset, p->index, &own);
    if (rc < 0) {
        larder__plain_close(p);
        return rc;
    }
    *out = p;
    return 0;
}

void larder__plain_close(struct larder__plain *p)
{
    if (!p) return;
    unlink(p->index);
    rmdir(p->dir);
    free(p);
}
