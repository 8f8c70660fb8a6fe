/*
 * source_plain.c - an index, or plain files listed at mount time
 * (source_plain.h).
 */
#include "source_plain.h"

#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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

#define PREFIX "larder-mount-"

/*
 * Remove what mounts killed before they could clean up left in tmp: the
 * directories PREFIX<pid>-XXXXXX of this user whose process is gone (a
 * pid alive again, reused, only keeps its directory a while longer).
 */
static void clear_stale(const char *tmp)
{
    DIR *dir = opendir(tmp);
    if (!dir) return;
    for (struct dirent *e; (e = readdir(dir));) {
        char *end;
        if (strncmp(e->d_name, PREFIX, strlen(PREFIX)) != 0) continue;
        long pid = strtol(e->d_name + strlen(PREFIX), &end, 10);
        struct stat st;
        if (end == e->d_name + strlen(PREFIX) || *end != '-' || pid <= 0 ||
            (kill((pid_t)pid, 0) == 0 || errno != ESRCH) ||
            fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
            st.st_uid != geteuid())
            continue;
        int fd = openat(dirfd(dir), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        DIR *stale = fd < 0 ? NULL : fdopendir(fd);
        if (!stale) {
            if (fd >= 0) close(fd);
            continue;
        }
        for (struct dirent *f; (f = readdir(stale));)
            if (strcmp(f->d_name, ".") != 0 && strcmp(f->d_name, "..") != 0)
                unlinkat(dirfd(stale), f->d_name, 0);
        closedir(stale);
        if (unlinkat(dirfd(dir), e->d_name, AT_REMOVEDIR) == 0)
            larder__log(LARDER_LOG_INFO, "%s/%s: removed, left by a mount that is gone", tmp,
                        e->d_name);
    }
    closedir(dir);
}

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
    clear_stale(tmp);
    /* the pid in the name lets a later mount clear it after a kill -9 */
    snprintf(p->dir, sizeof p->dir, "%s/%s%ld-XXXXXX", tmp, PREFIX, (long)getpid());
    if (!mkdtemp(p->dir)) { /* 0700 */
        int rc = larder__fail(-errno, "%s: %s", p->dir, strerror(errno));
        free(p);
        return rc;
    }
    /* 0700, also with a node daemon: the daemon opens an index marked
     * unchecked only for a client of its own user, who can read this
     * directory (docs/security.md); through another user's daemon the
     * mount reads the files itself */
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
