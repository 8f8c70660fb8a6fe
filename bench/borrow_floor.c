/*
 * borrow_floor.c - the least work a borrowed byte needs on one machine,
 * with nothing of larder in it: how fast can any borrower go here?
 *
 *   larder_bench_borrow_floor [--rounds N] [--dir DIR] [--reader NxBYTES] FILE...
 *
 * Issue 16 measures a reader borrowing end to end (an owner sends cache
 * bytes over loopback TCP, the reader's daemon stages them in its cache,
 * the reader reads and checks them) against a plain TCP copy of the same
 * bytes.  On one machine all three processes share its cores, so the
 * borrow can only reach the copy's rate if its extra work (the staging
 * write, the reader's read and check) costs no CPU the copy needed.  This
 * program runs the copy and the leanest pipelines that do that work, in
 * one run, alternated, so that the ratio it prints is a ceiling for
 * borrowing on this machine, whatever the daemon's design:
 *
 *   copy         sender: sendfile() of each FILE in turn over one loopback
 *                TCP connection; receiver: recv() into a 1 MiB buffer,
 *                bytes discarded (bench/peer.sh's copy, in C)
 *   copy-waitall the same, recv(MSG_WAITALL) of whole 1 MiB pieces: fewer
 *                wake-ups on both sides; the ceiling is the faster copy
 *   pwrite       receiver: recv(MSG_WAITALL) of 1 MiB pieces, pwrite() of
 *                each into a staging file; a third process, the reader,
 *                told of each piece over a pipe, pread()s it in reads of
 *                BYTES (256 KiB) into N (64) buffers in turn and hashes
 *                each read with XXH3: what `larder warm`, bench/peer.sh's
 *                reader, does with resident samples of that size
 *   pwrite+check the same, the receiver hashing each piece before it
 *                writes it (larder's daemon checks what it borrows)
 *   splice       receiver: splice() socket -> pipe -> staging file, 1 MiB
 *                at a time (no copy through user space); reader as above
 *   mmap         receiver: recv(MSG_WAITALL) straight into a shared
 *                mapping of the staging file, sized first; reader as above
 *
 * Every mode moves the same bytes, the FILEs read once before the first
 * round so that they come from the page cache.  A round runs each mode
 * once, starting one mode later each round; the staging file is made
 * fresh for each run (in DIR, default the current directory) and removed
 * after it.  The clock starts once the reader has its buffers in memory,
 * at the connection, and runs to the end of the last process (the
 * reader, where there is one).  Printed, per mode, one line per round
 * ("MODE SECONDS MB/s SENDER_MS RECEIVER_MS READER_MS", CPU from
 * getrusage; the reader's counted once its buffers are in memory), then
 * "median MODE MB/s RATIO" against the faster copy's median, and the
 * reader's XXH3 of all bytes, equal for every mode that has a reader
 * (checked: a mismatch exits 1).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"

#define PIECE (1u << 20)
#define MAX_ROUNDS 64

enum mode { COPY, COPY_WAITALL, PWRITE, PWRITE_CHECK, SPLICE, MMAP, MODES };
static const char *mode_name[MODES] = {"copy",         "copy-waitall", "pwrite",
                                       "pwrite+check", "splice",       "mmap"};

static char **files;
static int nfiles;
static uint64_t total;
static const char *dir = ".";
/* the reader's buffers: larder warm's by default (two lanes of 32 reads
 * in flight, each into a buffer of its own kept for the next batch), with
 * the benchmark's samples of 256 KiB */
static size_t reader_buffers = 64, reader_piece = 256 << 10;

static void die(const char *what)
{
    fprintf(stderr, "borrow_floor: %s: %s\n", what, strerror(errno));
    exit(2);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_ms(const struct rusage *r)
{
    return (r->ru_utime.tv_sec + r->ru_stime.tv_sec) * 1e3 +
           (r->ru_utime.tv_usec + r->ru_stime.tv_usec) / 1e3;
}

static void write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("write");
        c += w;
        n -= (size_t)w;
    }
}

/* read exactly n bytes; -1 on an error or an early end */
static int read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* The sender: sendfile of every file, in order, over the accepted socket. */
static void sender(int listener)
{
    int s = accept(listener, NULL, NULL);
    if (s < 0) die("accept");
    for (int i = 0; i < nfiles; i++) {
        int fd = open(files[i], O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) die(files[i]);
        off_t off = 0;
        while (off < st.st_size) {
            ssize_t n = sendfile(s, fd, &off, (size_t)(st.st_size - off));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) die("sendfile");
        }
        close(fd);
    }
    close(s);
}

/* The reader: each 8-byte message is how far the staging file now holds
 * the bytes; it reads and hashes up to there, a piece at a time, and at
 * the pipe's end writes its hash of everything to `out`. */
static void reader(int notes, const char *path, int out)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) die(path);
    char *bufs = malloc(reader_buffers * reader_piece);
    XXH3_state_t *all = XXH3_createState();
    if (bufs == NULL || all == NULL) die("malloc");
    /* the buffers faulted in, then the parent told to start its clock; the
     * CPU reported is what the reading took from there */
    memset(bufs, 0, reader_buffers * reader_piece);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    write_all(out, "r", 1);
    size_t turn = 0;
    XXH3_64bits_reset(all);
    uint64_t done = 0, upto;
    for (;;) {
        ssize_t n = read(notes, &upto, sizeof upto);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) break;
        if (n != sizeof upto) die("reader's notes");
        while (done < upto) {
            size_t want = upto - done < reader_piece ? (size_t)(upto - done) : reader_piece;
            char *buf = bufs + (turn++ % reader_buffers) * reader_piece;
            ssize_t got = pread(fd, buf, want, (off_t)done);
            if (got <= 0) die("pread");
            /* the block's own check, then the running hash this program
             * compares across modes */
            volatile XXH64_hash_t h = XXH3_64bits(buf, (size_t)got);
            (void)h;
            XXH3_64bits_update(all, buf, (size_t)got);
            done += (uint64_t)got;
        }
    }
    uint64_t h = XXH3_64bits_digest(all);
    getrusage(RUSAGE_SELF, &r1);
    double used = cpu_ms(&r1) - cpu_ms(&r0);
    write_all(out, &h, sizeof h);
    write_all(out, &used, sizeof used);
    close(fd);
}

/* recv until `want` bytes are in or the peer closed; returns what came */
static size_t recv_full(int s, char *p, size_t want)
{
    size_t got = 0;
    while (got < want) {
        ssize_t n = recv(s, p + got, want - got, MSG_WAITALL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("recv");
        if (n == 0) break;
        got += (size_t)n;
    }
    return got;
}

struct run {
    double seconds, sender_ms, receiver_ms, reader_ms;
    uint64_t hash;
};

static struct run one_run(enum mode m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/borrow-floor-stage.%d", dir, (int)getpid());
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(listener, 1) < 0 || getsockname(listener, (struct sockaddr *)&a, &alen) < 0)
        die("listen");
    pid_t send_pid = fork();
    if (send_pid < 0) die("fork");
    if (send_pid == 0) {
        sender(listener);
        _exit(0);
    }
    close(listener);

    int stage = -1, notes[2] = {-1, -1}, answer[2] = {-1, -1};
    pid_t read_pid = -1;
    char *map = NULL;
    if (m != COPY && m != COPY_WAITALL) {
        stage = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (stage < 0) die(path);
        if (m == MMAP) {
            if (ftruncate(stage, (off_t)total) < 0) die("ftruncate");
            map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, stage, 0);
            if (map == MAP_FAILED) die("mmap");
        }
        if (pipe(notes) < 0 || pipe(answer) < 0) die("pipe");
        read_pid = fork();
        if (read_pid < 0) die("fork");
        if (read_pid == 0) {
            close(notes[1]);
            close(answer[0]);
            reader(notes[0], path, answer[1]);
            _exit(0);
        }
        close(notes[0]);
        close(answer[1]);
    }

    struct rusage self0, self1, kids;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) die("socket");
    char ready;
    if (stage >= 0 && read_all(answer[0], &ready, 1) < 0) die("the reader's start");
    getrusage(RUSAGE_SELF, &self0);
    double t0 = now();
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
    char *buf = malloc(PIECE);
    int pp[2] = {-1, -1};
    if (buf == NULL) die("malloc");
    if (m == SPLICE) {
        if (pipe(pp) < 0) die("pipe");
        fcntl(pp[1], F_SETPIPE_SZ, PIECE); /* as large as allowed; smaller works */
    }
    uint64_t got = 0;
    for (;;) {
        size_t n = 0;
        if (m == COPY_WAITALL) {
            n = recv_full(s, buf, PIECE);
        } else if (m == COPY) {
            ssize_t r = recv(s, buf, PIECE, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) die("recv");
            n = (size_t)r;
        } else if (m == PWRITE || m == PWRITE_CHECK) {
            n = recv_full(s, buf, PIECE);
            if (n > 0 && m == PWRITE_CHECK) {
                volatile XXH64_hash_t h = XXH3_64bits(buf, n);
                (void)h;
            }
            for (size_t w = 0; w < n;) {
                ssize_t r = pwrite(stage, buf + w, n - w, (off_t)(got + w));
                if (r <= 0) die("pwrite");
                w += (size_t)r;
            }
        } else if (m == SPLICE) {
            /* socket -> pipe -> file, until a piece is in (or the end) */
            size_t want = total - got < PIECE ? (size_t)(total - got) : PIECE;
            while (n < want) {
                ssize_t r = splice(s, NULL, pp[1], NULL, want - n, SPLICE_F_MOVE);
                if (r < 0 && errno == EINTR) continue;
                if (r < 0) die("splice from the socket");
                if (r == 0) break;
                loff_t off = (loff_t)(got + n);
                for (ssize_t left = r; left > 0;) {
                    ssize_t w = splice(pp[0], NULL, stage, &off, (size_t)left, SPLICE_F_MOVE);
                    if (w <= 0) die("splice to the file");
                    left -= w;
                }
                n += (size_t)r;
            }
        } else { /* MMAP */
            size_t want = total - got < PIECE ? (size_t)(total - got) : PIECE;
            n = want ? recv_full(s, map + got, want) : 0;
        }
        if (n == 0) break;
        got += n;
        if (stage >= 0) {
            uint64_t upto = got;
            write_all(notes[1], &upto, sizeof upto);
        }
    }
    struct run r = {0};
    if (got != total) {
        fprintf(stderr, "borrow_floor: %s received %llu of %llu bytes\n", mode_name[m],
                (unsigned long long)got, (unsigned long long)total);
        exit(2);
    }
    if (stage >= 0) {
        close(notes[1]);
        if (read_all(answer[0], &r.hash, sizeof r.hash) < 0 ||
            read_all(answer[0], &r.reader_ms, sizeof r.reader_ms) < 0)
            die("the reader's hash");
        close(answer[0]);
    }
    int status;
    if (read_pid > 0 && waitpid(read_pid, &status, 0) < 0) die("waitpid");
    double t1 = now();
    getrusage(RUSAGE_SELF, &self1);
    struct rusage read_done; /* the reader's CPU is its own report; the sender's alone below */
    getrusage(RUSAGE_CHILDREN, &read_done);
    if (waitpid(send_pid, &status, 0) < 0) die("waitpid");
    getrusage(RUSAGE_CHILDREN, &kids);
    r.seconds = t1 - t0;
    r.receiver_ms = cpu_ms(&self1) - cpu_ms(&self0);
    r.sender_ms = cpu_ms(&kids) - cpu_ms(&read_done);
    close(s);
    if (pp[0] >= 0) {
        close(pp[0]);
        close(pp[1]);
    }
    if (map != NULL) munmap(map, total);
    if (stage >= 0) {
        close(stage);
        unlink(path);
    }
    free(buf);
    return r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int rounds = 5, i = 1;
    bool bad = false;
    for (; i < argc && !bad && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--reader") == 0 && i + 1 < argc)
            bad = sscanf(argv[++i], "%zux%zu", &reader_buffers, &reader_piece) != 2 ||
                  reader_buffers < 1 || reader_buffers > 4096 || reader_piece < 4096 ||
                  reader_piece > (64u << 20) || reader_buffers * reader_piece > (1u << 30);
        else
            bad = true;
    }
    if (bad || i >= argc || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "usage: larder_bench_borrow_floor [--rounds 1-%d] [--dir DIR] "
                "[--reader N(1-4096)xBYTES(4K-64M), 1G at most] FILE...\n",
                MAX_ROUNDS);
        return 2;
    }
    files = argv + i;
    nfiles = argc - i;
    /* every FILE once through the page cache, so that each mode sends the
     * same resident bytes */
    char *buf = malloc(PIECE);
    if (buf == NULL) die("malloc");
    for (int f = 0; f < nfiles; f++) {
        int fd = open(files[f], O_RDONLY);
        if (fd < 0) die(files[f]);
        ssize_t n;
        while ((n = read(fd, buf, PIECE)) > 0)
            total += (uint64_t)n;
        if (n < 0) die(files[f]);
        close(fd);
    }
    free(buf);
    if (total == 0) {
        fprintf(stderr, "borrow_floor: the files are empty\n");
        return 2;
    }
    printf("bytes %llu files %d rounds %d\n", (unsigned long long)total, nfiles, rounds);
    double rate[MODES][MAX_ROUNDS];
    uint64_t hash = 0;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < MODES; k++) {
            enum mode m = (enum mode)((r + k) % MODES);
            struct run x = one_run(m);
            rate[m][r] = total / x.seconds / 1e6;
            if (m != COPY && m != COPY_WAITALL) {
                if (hash != 0 && x.hash != hash) {
                    fprintf(stderr,
                            "borrow_floor: %s read other bytes (hash %016llx, not %016llx)\n",
                            mode_name[m], (unsigned long long)x.hash, (unsigned long long)hash);
                    return 1;
                }
                hash = x.hash;
            }
            printf("%s %.3f %.0f %.0f %.0f %.0f\n", mode_name[m], x.seconds, rate[m][r],
                   x.sender_ms, x.receiver_ms, x.reader_ms);
            fflush(stdout);
        }
    }
    double med[MODES];
    for (int m = 0; m < MODES; m++) {
        qsort(rate[m], (size_t)rounds, sizeof rate[m][0], cmp_double);
        med[m] = rate[m][(rounds - 1) / 2];
    }
    double ceiling = med[COPY] > med[COPY_WAITALL] ? med[COPY] : med[COPY_WAITALL];
    for (int m = 0; m < MODES; m++)
        printf("median %s %.0f %.2f\n", mode_name[m], med[m], med[m] / ceiling);
    printf("xxh3 %016llx\n", (unsigned long long)hash);
    return 0;
}
