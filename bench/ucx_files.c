/*
 * ucx_files.c - UCX's own ceiling for serving a dataset: UCX moving the
 * same bytes out of the same files, with nothing of larder in between.
 *
 *   larder_bench_ucx_files [--tag] PASSES IN_FLIGHT MESSAGE_KB FILE...
 *
 * ucx_perftest -t ucp_am_bw sends one 1 MiB buffer again and again: a
 * buffer hot in the CPU's cache, registered once.  A daemon serving a
 * peer sends each MiB of its cache files once per pass: bytes that come
 * out of the page cache (DRAM), from a mapping of each file registered
 * once (transport_ucx_map.c).  This program is the perftest of that: the
 * process forks; the child maps every FILE whole (read only), registers
 * each mapping with ucp_mem_map, and sends it as active messages of
 * MESSAGE_KB (the last of a file shorter), IN_FLIGHT at once, PASSES
 * times over; the parent receives each by rendezvous (or eagerly, as UCX
 * chooses) into IN_FLIGHT rotating buffers of its own, as a borrower's
 * reading threads do.  Both busy-poll their worker on one thread, as
 * ucx_perftest does.  The worker addresses are swapped over a socketpair.
 * UCX_TLS and the rest of UCX's environment apply.
 *
 * With --tag the same bytes go as tagged messages instead (tag = the
 * message's number): the receiver posts IN_FLIGHT receives ahead, into
 * the same rotating buffers, so that UCX matches each arriving message
 * (or its rendezvous request) to a posted buffer inside its progress and
 * pulls it at once, with no callback of ours between; the other way UCX
 * offers to move the bytes, measured so the ceiling is the better of the
 * two (bench/peer.sh).
 *
 * Prints "BYTES MB/s" (the receiver's bytes, from its first message to
 * its last) like larder_bench_peer.  bench/peer.sh section 3.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

enum { AM_DATA = 1, AM_END = 2 };

static int tagged; /* --tag: tagged messages, receives posted ahead */
static ucp_context_h context;
static ucp_worker_h worker;
static ucp_ep_h ep;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "ucx_files: %s\n", what);
    exit(1);
}

static int io_all(int fd, void *buf, size_t length, int writing)
{
    uint8_t *b = buf;
    while (length) {
        ssize_t n = writing ? write(fd, b, length) : read(fd, b, length);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        b += n, length -= (size_t)n;
    }
    return 0;
}

/* UCP's context, worker, and an endpoint to the other process's worker (over `sock`). */
static void wire_up(int sock)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_AM | UCP_FEATURE_TAG};
    ucp_config_t *config;
    if (ucp_config_read(NULL, NULL, &config) != UCS_OK ||
        ucp_init(&params, config, &context) != UCS_OK)
        die("no UCP context");
    ucp_config_release(config);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_worker_create(context, &wp, &worker) != UCS_OK) die("no UCP worker");
    ucp_address_t *address;
    size_t length, other_length;
    if (ucp_worker_get_address(worker, &address, &length) != UCS_OK) die("no worker address");
    uint64_t n = length;
    if (io_all(sock, &n, sizeof n, 1) < 0 || io_all(sock, address, length, 1) < 0 ||
        io_all(sock, &n, sizeof n, 0) < 0 || n > 65536)
        die("address exchange");
    other_length = (size_t)n;
    void *other = malloc(other_length);
    if (!other || io_all(sock, other, other_length, 0) < 0) die("address exchange");
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = other};
    if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) die("no endpoint");
    ucp_worker_release_address(worker, address);
    free(other);
}

/* ---- the sender: the files, mapped and registered once -------------------------------- */

static int in_flight;
struct slot {
    uint64_t header; /* UCX reads it until the send is done */
    int busy;
};

static void sent(void *request, ucs_status_t status, void *user_data)
{
    struct slot *slot = user_data;
    if (status != UCS_OK) die("a send failed");
    slot->busy = 0;
    in_flight--;
    ucp_request_free(request);
}

static void send_files(int passes, int most, size_t message, int count, char **names)
{
    uint8_t **bases = calloc((size_t)count, sizeof *bases);
    size_t *sizes = calloc((size_t)count, sizeof *sizes);
    ucp_mem_h *memhs = calloc((size_t)count, sizeof *memhs);
    if (!bases || !sizes || !memhs) die("out of memory");
    for (int i = 0; i < count; i++) {
        int fd = open(names[i], O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) die("cannot open a file");
        sizes[i] = (size_t)st.st_size;
        bases[i] = mmap(NULL, sizes[i], PROT_READ, MAP_SHARED, fd, 0);
        if (bases[i] == MAP_FAILED) die("cannot map a file");
        close(fd);
        ucp_mem_map_params_t mp = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                          UCP_MEM_MAP_PARAM_FIELD_FLAGS | UCP_MEM_MAP_PARAM_FIELD_PROT,
            .address = bases[i],
            .length = sizes[i],
            .flags = UCP_MEM_MAP_NONBLOCK,
            .prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_REMOTE_READ};
        if (ucp_mem_map(context, &mp, &memhs[i]) != UCS_OK) memhs[i] = NULL;
    }
    uint64_t seq = 0;
    struct slot *slots = calloc((size_t)most, sizeof *slots);
    if (!slots) die("out of memory");
    for (int pass = 0; pass < passes; pass++)
        for (int i = 0; i < count; i++)
            for (size_t offset = 0; offset < sizes[i]; offset += message) {
                while (in_flight >= most)
                    ucp_worker_progress(worker);
                size_t length = sizes[i] - offset < message ? sizes[i] - offset : message;
                struct slot *slot = slots;
                while (slot->busy)
                    slot++; /* one is free: fewer than `most` are in flight */
                slot->header = seq++;
                slot->busy = 1;
                ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                             UCP_OP_ATTR_FIELD_USER_DATA |
                                                             UCP_OP_ATTR_FIELD_DATATYPE,
                                             .cb.send = sent,
                                             .user_data = slot,
                                             .datatype = ucp_dt_make_contig(1)};
                if (memhs[i]) {
                    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
                    param.memh = memhs[i];
                }
                ucs_status_ptr_t r =
                    tagged ? ucp_tag_send_nbx(ep, bases[i] + offset, length, slot->header, &param)
                           : ucp_am_send_nbx(ep, AM_DATA, &slot->header, sizeof slot->header,
                                             bases[i] + offset, length, &param);
                if (UCS_PTR_IS_ERR(r)) die("a send failed");
                if (r)
                    in_flight++;
                else
                    slot->busy = 0;
            }
    while (in_flight > 0)
        ucp_worker_progress(worker);
    if (tagged) return; /* the receiver counts the messages itself */
    ucp_request_param_t param = {.op_attr_mask = 0};
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, AM_END, NULL, 0, NULL, 0, &param);
    while (r && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
        ucp_worker_progress(worker);
    if (r && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
}

/* ---- the receiver: IN_FLIGHT rotating buffers of its own ------------------------------- */

static uint8_t **buffers;
static int num_buffers;
static uint64_t received, messages, rendezvous;
static double first_s, last_s;
static int ended;
static int receiving;
static struct pending {
    void *descriptor;
    size_t length;
    uint64_t seq;
} * queue;
static int queued;

static void landed(void *request, ucs_status_t status, size_t length, void *user_data)
{
    (void)user_data;
    if (status != UCS_OK) die("a receive failed");
    received += length;
    last_s = now_s();
    receiving--;
    ucp_request_free(request);
}

static ucs_status_t on_data(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg;
    if (header_length != sizeof(uint64_t)) die("a malformed message");
    uint64_t seq;
    memcpy(&seq, header, sizeof seq);
    if (messages++ == 0) first_s = now_s();
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) { /* eager: copied out here */
        memcpy(buffers[seq % (uint64_t)num_buffers], data, length);
        received += length;
        last_s = now_s();
        return UCS_OK;
    }
    rendezvous++;
    queue[queued++] = (struct pending){.descriptor = data, .length = length, .seq = seq};
    return UCS_INPROGRESS; /* pulled once the callback has returned */
}

static ucs_status_t on_end(void *arg, const void *header, size_t header_length, void *data,
                           size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg, (void)header, (void)header_length, (void)data, (void)length, (void)param;
    ended = 1;
    return UCS_OK;
}

static void receive(int most, size_t message)
{
    num_buffers = most;
    buffers = calloc((size_t)most, sizeof *buffers);
    queue = calloc(4096, sizeof *queue);
    if (!buffers || !queue) die("out of memory");
    for (int i = 0; i < most; i++)
        if (!(buffers[i] = malloc(message))) die("out of memory");
    ucp_am_handler_param_t h = {.field_mask =
                                    UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB,
                                .id = AM_DATA,
                                .cb = on_data};
    if (ucp_worker_set_am_recv_handler(worker, &h) != UCS_OK) die("no handler");
    h.id = AM_END;
    h.cb = on_end;
    if (ucp_worker_set_am_recv_handler(worker, &h) != UCS_OK) die("no handler");
    while (!ended || receiving > 0 || queued > 0) {
        ucp_worker_progress(worker);
        for (int i = 0; i < queued; i++) {
            struct pending *p = &queue[i];
            if (p->length > message) die("a message larger than asked");
            ucp_request_param_t rp = {.op_attr_mask =
                                          UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE,
                                      .cb.recv_am = landed,
                                      .datatype = ucp_dt_make_contig(1)};
            ucs_status_ptr_t r = ucp_am_recv_data_nbx(
                worker, p->descriptor, buffers[p->seq % (uint64_t)most], p->length, &rp);
            if (UCS_PTR_IS_ERR(r)) die("a receive failed");
            if (r) {
                receiving++;
            } else {
                received += p->length;
                last_s = now_s();
            }
        }
        queued = 0;
    }
}

/* ---- the receiver, --tag: IN_FLIGHT receives posted ahead --------------------------- */

struct posted {
    uint64_t seq;
    int busy;
};

static void tag_landed(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                       void *user_data)
{
    struct posted *slot = user_data;
    if (status != UCS_OK) die("a receive failed");
    if (messages++ == 0) first_s = now_s();
    received += info->length;
    last_s = now_s();
    slot->busy = 0;
    ucp_request_free(request);
}

/* Every message's number is known ahead (the files' sizes, as the sender
 * cuts them): a receive is posted for each, IN_FLIGHT at once. */
static void receive_tagged(int passes, int most, size_t message, int count, char **names)
{
    uint64_t total = 0;
    for (int i = 0; i < count; i++) {
        struct stat st;
        if (stat(names[i], &st) < 0 || st.st_size == 0) die("cannot open a file");
        total += ((uint64_t)st.st_size + message - 1) / message;
    }
    total *= (uint64_t)passes;
    struct posted *slots = calloc((size_t)most, sizeof *slots);
    uint8_t **bufs = calloc((size_t)most, sizeof *bufs);
    if (!slots || !bufs) die("out of memory");
    for (int i = 0; i < most; i++)
        if (!(bufs[i] = malloc(message))) die("out of memory");
    uint64_t next = 0;
    for (;;) {
        for (int i = 0; i < most && next < total; i++) {
            if (slots[i].busy) continue;
            slots[i].busy = 1;
            slots[i].seq = next;
            ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                      UCP_OP_ATTR_FIELD_USER_DATA |
                                                      UCP_OP_ATTR_FIELD_DATATYPE,
                                      .cb.recv = tag_landed,
                                      .user_data = &slots[i],
                                      .datatype = ucp_dt_make_contig(1)};
            ucs_status_ptr_t r =
                ucp_tag_recv_nbx(worker, bufs[i], message, (ucp_tag_t)next, (ucp_tag_t)-1, &rp);
            if (UCS_PTR_IS_ERR(r)) die("a receive failed");
            next++;
        }
        int busy = 0;
        for (int i = 0; i < most; i++)
            busy += slots[i].busy;
        if (next >= total && busy == 0) break;
        ucp_worker_progress(worker);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--tag") == 0) {
        tagged = 1;
        argv++, argc--;
    }
    if (argc < 5) {
        fprintf(stderr, "usage: %s [--tag] PASSES IN_FLIGHT MESSAGE_KB FILE...\n", argv[0]);
        return 2;
    }
    int passes = atoi(argv[1]), most = atoi(argv[2]);
    size_t message = (size_t)atoi(argv[3]) * 1024;
    if (passes < 1 || most < 1 || most > 1024 || message == 0) die("bad arguments");
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0) die("no socketpair");
    pid_t child = fork();
    if (child < 0) die("no fork");
    if (child == 0) { /* the sender */
        close(pair[0]);
        wire_up(pair[1]);
        send_files(passes, most, message, argc - 4, argv + 4);
        char done;
        (void)!read(pair[1], &done, 1); /* until the receiver has it all */
        _exit(0); /* UCX's state goes with the process (the mappings are still registered) */
    }
    close(pair[1]);
    wire_up(pair[0]);
    if (tagged)
        receive_tagged(passes, most, message, argc - 4, argv + 4);
    else
        receive(most, message);
    close(pair[0]); /* the sender may go */
    int status;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the sender failed");
    double seconds = last_s - first_s;
    if (tagged)
        fprintf(stderr, "messages: %llu (tagged)\n", (unsigned long long)messages);
    else
        fprintf(stderr, "messages: %llu (%llu by rendezvous)\n", (unsigned long long)messages,
                (unsigned long long)rendezvous);
    printf("%llu %.1f\n", (unsigned long long)received, seconds > 0 ? received / seconds / 1e6 : 0);
    return 0;
}
