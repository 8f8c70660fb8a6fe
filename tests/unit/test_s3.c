/*
 * test_s3.c - s3:// URLs, endpoints and addressing, the credentials
 * lookup and its file parser (with a fuzz-style bad-input test), and
 * the SigV4 signatures libcurl makes with larder's settings, checked
 * against AWS's published test vectors by capturing the requests on a
 * loopback listener.  tests/cli/s3.sh runs the whole path against a
 * real S3-compatible server that verifies signatures.
 */
#include "source.h"
#include "s3.h"
#include "test.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* Every variable the S3 code reads, so a developer's own AWS setup cannot leak in. */
static void clean_environment(void)
{
    static const char *names[] = {"AWS_ACCESS_KEY_ID",
                                  "AWS_SECRET_ACCESS_KEY",
                                  "AWS_SESSION_TOKEN",
                                  "AWS_PROFILE",
                                  "AWS_REGION",
                                  "AWS_DEFAULT_REGION",
                                  "AWS_ENDPOINT_URL",
                                  "AWS_ENDPOINT_URL_S3",
                                  "LARDER_S3_ENDPOINT",
                                  "LARDER_S3_ADDRESSING",
                                  "AWS_SHARED_CREDENTIALS_FILE"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        unsetenv(names[i]);
    setenv("HOME", test_dir(), 1); /* no ~/.aws/credentials unless a test writes one */
}

/* ---- URLs ----------------------------------------------------------------- */

TEST(s3_parse_url)
{
    struct larder__s3_location at;
    CHECK_EQ(larder__s3_parse_url("s3://bucket/a/b c.tar", &at), 0);
    CHECK(at.bucket_length == 6 && memcmp(at.bucket, "bucket", 6) == 0);
    CHECK(strcmp(at.key, "a/b c.tar") == 0);
    CHECK_EQ(larder__s3_parse_url("s3://My_Bucket.v2/k", &at), 0);
    static const char *bad[] = {"s3://",        "s3:///key",      "s3://bucket",
                                "s3://bucket/", "s3://b@d/key",   "s3://host:9000/key",
                                "http://b/key", "s3://b?x=1/key", "s3://b%2F/key"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (larder__s3_parse_url(bad[i], &at) != LARDER_EUSAGE) fprintf(stderr, "    %s\n", bad[i]);
        CHECK_EQ(larder__s3_parse_url(bad[i], &at), LARDER_EUSAGE);
        CHECK(strstr(larder_errmsg(), bad[i]) != NULL);
    }
}

/* The URL larder__s3_open resolves `url` to, with `options`, or "error N: message". */
static const char *resolved(const char *url, const struct larder__s3_options *options)
{
    static char out[4096];
    struct larder__s3 *s3 = NULL;
    int rc = larder__s3_open(&s3, url, options);
    if (rc < 0)
        snprintf(out, sizeof out, "error %d: %s", rc, larder_errmsg());
    else
        snprintf(out, sizeof out, "%s", larder__s3_http_url(s3));
    larder__s3_close(s3);
    return out;
}

static void expect_url(const char *url, const char *want)
{
    const char *got = resolved(url, NULL);
    if (strcmp(got, want) != 0) fprintf(stderr, "    %s -> %s, want %s\n", url, got, want);
    CHECK(strcmp(got, want) == 0);
}

TEST(s3_endpoints_and_addressing)
{
    clean_environment();
    /* AWS: virtual-host style in the region's endpoint; keys percent-encoded once */
    expect_url("s3://data/set/shard-000.tar",
               "https://data.s3.us-east-1.amazonaws.com/set/shard-000.tar");
    expect_url("s3://data/a b/c+d~e%.tar",
               "https://data.s3.us-east-1.amazonaws.com/a%20b/c%2Bd~e%25.tar");
    setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
    expect_url("s3://data/k", "https://data.s3.eu-west-1.amazonaws.com/k");
    setenv("AWS_REGION", "ap-south-2", 1); /* AWS_REGION wins */
    expect_url("s3://data/k", "https://data.s3.ap-south-2.amazonaws.com/k");
    setenv("AWS_REGION", "cn-north-1", 1);
    expect_url("s3://data/k", "https://data.s3.cn-north-1.amazonaws.com.cn/k");
    setenv("AWS_REGION", "us-east-1", 1);
    /* bucket names that cannot be a host name go path-style */
    expect_url("s3://my.data/k", "https://s3.us-east-1.amazonaws.com/my.data/k");
    expect_url("s3://Data_1/k", "https://s3.us-east-1.amazonaws.com/Data_1/k");

    /* an endpoint: path-style; the most specific variable wins */
    setenv("AWS_ENDPOINT_URL", "http://generic:1", 1);
    expect_url("s3://data/k", "http://generic:1/data/k");
    setenv("AWS_ENDPOINT_URL_S3", "http://s3only:2/", 1);
    expect_url("s3://data/k", "http://s3only:2/data/k");
    setenv("LARDER_S3_ENDPOINT", "127.0.0.1:9000/base//", 1); /* no scheme: https */
    expect_url("s3://data/dir/k", "https://127.0.0.1:9000/base/data/dir/k");
    setenv("LARDER_S3_ENDPOINT", "HTTP://minio.local:9000", 1);
    expect_url("s3://data/k", "http://minio.local:9000/data/k");
    setenv("LARDER_S3_ADDRESSING", "virtual", 1);
    expect_url("s3://data/k", "http://data.minio.local:9000/k");
    CHECK(strncmp(resolved("s3://Data_1/k", NULL), "error -1012: ", 13) == 0);
    CHECK(strstr(resolved("s3://Data_1/k", NULL), "LARDER_S3_ADDRESSING=path") != NULL);
    setenv("LARDER_S3_ADDRESSING", "Path", 1);
    unsetenv("LARDER_S3_ENDPOINT"), unsetenv("AWS_ENDPOINT_URL_S3"), unsetenv("AWS_ENDPOINT_URL");
    expect_url("s3://data/k", "https://s3.us-east-1.amazonaws.com/data/k");
    setenv("LARDER_S3_ADDRESSING", "sideways", 1);
    CHECK(strstr(resolved("s3://data/k", NULL), "LARDER_S3_ADDRESSING='sideways'") != NULL);
    unsetenv("LARDER_S3_ADDRESSING");

    /* options override the environment */
    struct larder__s3_options options = {.endpoint = "http://[::1]:8333",
                                         .region = "local",
                                         .addressing = LARDER__S3_ADDRESSING_AUTO};
    CHECK(strcmp(resolved("s3://data/k", &options), "http://[::1]:8333/data/k") == 0);

    /* bad settings fail clearly */
    setenv("AWS_REGION", "us-east-1/../x", 1);
    CHECK(strstr(resolved("s3://data/k", NULL), "S3 region") != NULL);
    setenv("AWS_REGION", "us-east-1", 1);
    static const char *bad_endpoints[] = {"ftp://host", "http://", "http://user@host",
                                          "http://host/?q", "http://ho st"};
    for (size_t i = 0; i < sizeof bad_endpoints / sizeof *bad_endpoints; i++) {
        setenv("LARDER_S3_ENDPOINT", bad_endpoints[i], 1);
        const char *got = resolved("s3://data/k", NULL);
        if (!strstr(got, "S3 endpoint")) fprintf(stderr, "    %s -> %s\n", bad_endpoints[i], got);
        CHECK(strstr(got, "S3 endpoint") != NULL);
    }
}

/* ---- the credentials file --------------------------------------------------- */

static const char sample_file[] = "# written by aws configure\r\n"
                                  "[default]\r\n"
                                  "aws_access_key_id = AKIDDEFAULT\r\n"
                                  "aws_secret_access_key = secret/default+key\r\n"
                                  "\r\n"
                                  "[ training ]\n"
                                  "; a comment\n"
                                  "AWS_Access_Key_ID: AKIDTRAINING\n"
                                  "s3 =\n"
                                  "    max_concurrent_requests = 64\n"
                                  "    aws_access_key_id = NOT-THIS-ONE\n"
                                  "aws_secret_access_key=trainingsecret\n"
                                  "aws_session_token = FwoGZXIvYXdzE//token==\n"
                                  "region = eu-west-1\n"
                                  "[legacy]\n"
                                  "aws_access_key_id=AKIDLEGACY\n"
                                  "aws_secret_access_key=legacysecret\n"
                                  "aws_security_token=oldtoken\n"
                                  "[role]\n"
                                  "role_arn = arn:aws:iam::123456789012:role/reader\n"
                                  "source_profile = default\n"
                                  "[half]\n"
                                  "aws_access_key_id = AKIDHALF";

TEST(s3_credentials_file)
{
    struct larder__s3_credentials c;
    size_t n = sizeof sample_file - 1;
    CHECK_EQ(larder__s3_parse_credentials(sample_file, n, "default", &c), 0);
    CHECK(strcmp(c.access_key_id, "AKIDDEFAULT") == 0);
    CHECK(strcmp(c.secret_access_key, "secret/default+key") == 0);
    CHECK(c.session_token[0] == '\0');
    CHECK_EQ(larder__s3_parse_credentials(sample_file, n, "training", &c), 0);
    CHECK(strcmp(c.access_key_id, "AKIDTRAINING") == 0); /* not the nested block's */
    CHECK(strcmp(c.secret_access_key, "trainingsecret") == 0);
    CHECK(strcmp(c.session_token, "FwoGZXIvYXdzE//token==") == 0);
    CHECK_EQ(larder__s3_parse_credentials(sample_file, n, "legacy", &c), 0);
    CHECK(strcmp(c.session_token, "oldtoken") == 0);
    CHECK_EQ(larder__s3_parse_credentials(sample_file, n, "role", &c), LARDER_EUNSUPPORTED);
    CHECK(strstr(larder_errmsg(), "[role]") != NULL);
    CHECK_EQ(larder__s3_parse_credentials(sample_file, n, "half", &c), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "aws_secret_access_key") != NULL);
    CHECK(c.access_key_id[0] == '\0'); /* nothing half-filled on failure */
    CHECK_EQ(larder__s3_parse_credentials(sample_file, n, "Default", &c), LARDER_ENOTFOUND);
    CHECK_EQ(larder__s3_parse_credentials("", 0, "default", &c), LARDER_ENOTFOUND);
    /* a later section of the same name adds to the first */
    const char *twice = "[p]\naws_access_key_id=A\n[q]\n[p]\naws_secret_access_key=B\n";
    CHECK_EQ(larder__s3_parse_credentials(twice, strlen(twice), "p", &c), 0);
    CHECK(strcmp(c.access_key_id, "A") == 0 && strcmp(c.secret_access_key, "B") == 0);
}

/* `text` must fail for profile "p" with `code`, and the message must hold `needle`. */
static void expect_bad(const char *text, int code, const char *needle)
{
    struct larder__s3_credentials c;
    int rc = larder__s3_parse_credentials(text, strlen(text), "p", &c);
    if (rc != code || !strstr(larder_errmsg(), needle))
        fprintf(stderr, "    '%s': %d %s\n", text, rc, larder_errmsg());
    CHECK_EQ(rc, code);
    CHECK(strstr(larder_errmsg(), needle) != NULL);
    CHECK(c.access_key_id[0] == '\0' && c.secret_access_key[0] == '\0' &&
          c.session_token[0] == '\0');
}

/* What a successful parse may leave: NUL-terminated printable values within bounds. */
static void check_sane(const struct larder__s3_credentials *c)
{
    const char *fields[] = {c->access_key_id, c->secret_access_key, c->session_token};
    const size_t limits[] = {LARDER__S3_KEY_ID_MAX, LARDER__S3_SECRET_MAX, LARDER__S3_TOKEN_MAX};
    for (int f = 0; f < 3; f++) {
        size_t length = strnlen(fields[f], limits[f] + 1);
        CHECK(length <= limits[f]);
        for (size_t i = 0; i < length; i++)
            CHECK(fields[f][i] > ' ' && fields[f][i] < 0x7f);
    }
    CHECK(c->access_key_id[0] && c->secret_access_key[0]);
}

/* Parse a copy of text[0..length) in a buffer of exactly that size, so a
 * read past its end is caught by AddressSanitizer builds. */
static int parse_exact(const void *text, size_t length, const char *profile)
{
    char *copy = malloc(length ? length : 1);
    CHECK(copy != NULL);
    memcpy(copy, text, length);
    struct larder__s3_credentials c;
    memset(&c, 'x', sizeof c);
    int rc = larder__s3_parse_credentials(copy, length, profile, &c);
    CHECK(rc == 0 || rc == LARDER_ENOTFOUND || rc == LARDER_EUNSUPPORTED || rc == LARDER_EUSAGE);
    if (rc == 0)
        check_sane(&c);
    else
        CHECK(c.access_key_id[0] == '\0' && c.secret_access_key[0] == '\0' &&
              c.session_token[0] == '\0');
    free(copy);
    return rc;
}

TEST(s3_credentials_bad_input)
{
    expect_bad("aws_access_key_id = A\n[p]\n", LARDER_EUSAGE, "line 1: a setting before any");
    expect_bad("[p]\naws_access_key_id A\n", LARDER_EUSAGE, "line 2: neither");
    expect_bad("[p\naws_access_key_id = A\n", LARDER_EUSAGE, "line 1: a section header");
    expect_bad("[p]\n = A\n", LARDER_EUSAGE, "line 2: no name");
    expect_bad("[p]\naws_access_key_id = A B\naws_secret_access_key = S\n", LARDER_EUSAGE,
               "line 2: aws_access_key_id has a space");
    expect_bad("[p]\naws_access_key_id = A\naws_secret_access_key = S\x01\n", LARDER_EUSAGE,
               "line 3: aws_secret_access_key has a space or a character");
    char long_token[LARDER__S3_TOKEN_MAX + 64];
    snprintf(long_token, sizeof long_token, "[p]\naws_session_token = %0*d\n",
             LARDER__S3_TOKEN_MAX + 1, 0);
    expect_bad(long_token, LARDER_EUSAGE, "aws_session_token is longer than 4096 bytes");
    /* an error message never quotes a secret */
    expect_bad("[p]\naws_access_key_id = A\naws_secret_access_key = very secret\n", LARDER_EUSAGE,
               "line 3");
    CHECK(strstr(larder_errmsg(), "very") == NULL);
    /* NUL bytes are just bytes: the length bounds the text, not a terminator */
    static const char with_nul[] = "[p]\naws_access_key_id = A\0B\naws_secret_access_key = S\n";
    CHECK_EQ(parse_exact(with_nul, sizeof with_nul - 1, "p"), LARDER_EUSAGE);
    static const char nul_name[] = "[p\0q]\naws_access_key_id=A\naws_secret_access_key=S\n";
    CHECK_EQ(parse_exact(nul_name, sizeof nul_name - 1, "p"), LARDER_ENOTFOUND);

    /* every prefix of a valid file, then random mutations of it, then noise:
     * never a crash, a read out of bounds, a half-filled or unprintable result */
    size_t n = sizeof sample_file - 1;
    for (size_t length = 0; length <= n; length++) {
        parse_exact(sample_file, length, "default");
        parse_exact(sample_file, length, "training");
    }
    static const char alphabet[] = "[]=:;# \t\r\n\0azAZ09/+\x7f\xff";
    char buf[sizeof sample_file];
    int outcomes[4] = {0};
    for (uint64_t round = 0; round < 20000; round++) {
        memcpy(buf, sample_file, n);
        uint8_t noise[8];
        test_fill_random(noise, sizeof noise, round);
        for (int edit = 0; edit < 1 + noise[0] % 4; edit++) {
            uint8_t r[3];
            test_fill_random(r, sizeof r, round * 16 + (uint64_t)edit + 1);
            size_t at = (size_t)(r[0] | r[1] << 8) % n;
            buf[at] = r[2] & 1 ? alphabet[r[2] % (sizeof alphabet - 1)] : (char)r[2];
        }
        size_t length = noise[1] & 1 ? n : (size_t)(noise[2] | noise[3] << 8) % (n + 1);
        int rc = parse_exact(buf, length, noise[4] & 1 ? "training" : "default");
        outcomes[rc == 0 ? 0 : rc == LARDER_ENOTFOUND ? 1 : rc == LARDER_EUSAGE ? 2 : 3]++;
    }
    CHECK(outcomes[0] > 0 && outcomes[2] > 0); /* the mutations reached both ends */
    for (uint64_t round = 0; round < 2000; round++) {
        uint8_t noise[512];
        test_fill_random(noise, sizeof noise, round + 99);
        for (size_t i = 0; i < sizeof noise; i++)
            if (noise[i] % 3 == 0) noise[i] = (uint8_t)alphabet[noise[i] % (sizeof alphabet - 1)];
        parse_exact(noise, noise[0] + noise[1], "default");
    }
}

/* ---- where the credentials come from ------------------------------------------------ */

struct log_capture {
    char text[4096];
};

static void on_log(void *userdata, int level, const char *message)
{
    struct log_capture *log = userdata;
    (void)level;
    size_t used = strlen(log->text);
    snprintf(log->text + used, sizeof log->text - used, "%s\n", message);
}

/* Open s3://b/k: "" when signed, "anonymous", "+token" when a session token goes along, or "error
 * N". */
static const char *credentials_used(void)
{
    static char out[256];
    struct larder__s3 *s3 = NULL;
    int rc = larder__s3_open(&s3, "s3://b/k", NULL);
    if (rc < 0) {
        snprintf(out, sizeof out, "error %d", rc);
        return out;
    }
    const struct curl_slist *headers = larder__s3_headers(s3);
    bool has_token =
        headers && headers->next && strncmp(headers->next->data, "x-amz-security-token: ", 22) == 0;
    CHECK(larder__s3_signed(s3) == (headers != NULL));
    snprintf(out, sizeof out, "%s%s", larder__s3_signed(s3) ? "" : "anonymous",
             has_token ? "+token" : "");
    larder__s3_close(s3);
    return out;
}

TEST(s3_credentials_lookup)
{
    clean_environment();
    struct log_capture log = {{0}};
    larder_set_log(on_log, &log, LARDER_LOG_DEBUG);

    /* nothing anywhere: anonymous, and the debug log says so */
    CHECK(strcmp(credentials_used(), "anonymous") == 0);
    CHECK(strstr(log.text, "anonymous requests") != NULL);
    CHECK(strstr(log.text, "/.aws/credentials") != NULL);

    /* ~/.aws/credentials, profile from AWS_PROFILE */
    char path[4200];
    snprintf(path, sizeof path, "%s/.aws/credentials", test_dir());
    test_write_file(path, sample_file, sizeof sample_file - 1);
    log.text[0] = '\0';
    CHECK(strcmp(credentials_used(), "") == 0);
    CHECK(strstr(log.text, "key id AKIDDEFAULT from ") != NULL);
    CHECK(strstr(log.text, "[default]") != NULL);
    CHECK(strstr(log.text, "secret/default") == NULL); /* never a secret in a log */
    setenv("AWS_PROFILE", "training", 1);
    log.text[0] = '\0';
    CHECK(strcmp(credentials_used(), "+token") == 0);
    CHECK(strstr(log.text, "key id AKIDTRAINING") != NULL);
    setenv("AWS_PROFILE", "nobody", 1); /* asked for by name: its absence is an error */
    CHECK(strcmp(credentials_used(), "error -1004") == 0);
    CHECK(strstr(larder_errmsg(), path) != NULL && strstr(larder_errmsg(), "[nobody]") != NULL);
    setenv("AWS_PROFILE", "role", 1);
    CHECK(strcmp(credentials_used(), "error -1013") == 0);
    unsetenv("AWS_PROFILE");

    /* AWS_SHARED_CREDENTIALS_FILE instead of ~/.aws/credentials */
    const char *other = "[default]\naws_access_key_id=AKIDOTHER\naws_secret_access_key=x\n";
    test_write_file(test_path("other-credentials"), other, strlen(other));
    setenv("AWS_SHARED_CREDENTIALS_FILE", test_path("other-credentials"), 1);
    log.text[0] = '\0';
    CHECK(strcmp(credentials_used(), "") == 0);
    CHECK(strstr(log.text, "key id AKIDOTHER") != NULL);
    test_write_file(test_path("bad-credentials"), "junk\n", 5);
    setenv("AWS_SHARED_CREDENTIALS_FILE", test_path("bad-credentials"), 1);
    CHECK(strcmp(credentials_used(), "error -1012") == 0);
    CHECK(strstr(larder_errmsg(), "bad-credentials: line 1") != NULL);
    setenv("AWS_SHARED_CREDENTIALS_FILE", test_path("missing"), 1);
    CHECK(strcmp(credentials_used(), "anonymous") == 0);
    setenv("AWS_PROFILE", "training", 1);
    CHECK(strcmp(credentials_used(), "error -1004") == 0);
    CHECK(strstr(larder_errmsg(), "does not exist") != NULL);

    /* the environment's keys come first, the file is not even read */
    setenv("AWS_SHARED_CREDENTIALS_FILE", test_path("bad-credentials"), 1);
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    log.text[0] = '\0';
    CHECK(strcmp(credentials_used(), "") == 0);
    CHECK(strstr(log.text, "key id AKIDENV from the environment") != NULL);
    setenv("AWS_SESSION_TOKEN", "envtoken", 1);
    CHECK(strcmp(credentials_used(), "+token") == 0);
    unsetenv("AWS_SECRET_ACCESS_KEY");
    CHECK(strcmp(credentials_used(), "error -1012") == 0);
    CHECK(strstr(larder_errmsg(), "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not") !=
          NULL);
    setenv("AWS_SECRET_ACCESS_KEY", "env secret", 1);
    CHECK(strcmp(credentials_used(), "error -1012") == 0);
    CHECK(strstr(larder_errmsg(), "the environment: AWS_SECRET_ACCESS_KEY has a space") != NULL);
    larder_set_log(NULL, NULL, LARDER_LOG_WARN);
}

/* ---- signatures, on the wire ----------------------------------------------------------- */

/*
 * A loopback listener that records each request's head and answers it
 * with a canned response, one connection per request.
 */
#define CAPTURE_MAX 8
struct capture {
    int listener;
    int port;
    pthread_t thread;
    const char *response;
    char requests[CAPTURE_MAX][16384];
    int num_requests;
};

static void *capture_main(void *arg)
{
    struct capture *c = arg;
    while (c->num_requests < CAPTURE_MAX) {
        int fd = accept(c->listener, NULL, NULL);
        if (fd < 0) break; /* shut down */
        char *head = c->requests[c->num_requests];
        size_t used = 0;
        while (used < sizeof c->requests[0] - 1 && !strstr(head, "\r\n\r\n")) {
            ssize_t n = read(fd, head + used, sizeof c->requests[0] - 1 - used);
            if (n <= 0) break;
            used += (size_t)n;
            head[used] = '\0';
        }
        __atomic_add_fetch(&c->num_requests, 1, __ATOMIC_SEQ_CST);
        size_t length = strlen(c->response), sent = 0;
        while (sent < length) {
            ssize_t n = write(fd, c->response + sent, length - sent);
            if (n <= 0) break;
            sent += (size_t)n;
        }
        close(fd);
    }
    return NULL;
}

static void capture_start(struct capture *c, const char *response)
{
    memset(c, 0, sizeof *c);
    c->response = response;
    c->listener = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(c->listener >= 0);
    struct sockaddr_in address = {.sin_family = AF_INET};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    CHECK_EQ(bind(c->listener, (struct sockaddr *)&address, size), 0);
    CHECK_EQ(listen(c->listener, 8), 0);
    CHECK_EQ(getsockname(c->listener, (struct sockaddr *)&address, &size), 0);
    c->port = ntohs(address.sin_port);
    CHECK_EQ(pthread_create(&c->thread, NULL, capture_main, c), 0);
}

static int capture_stop(struct capture *c)
{
    shutdown(c->listener, SHUT_RDWR); /* wakes accept() */
    pthread_join(c->thread, NULL);
    close(c->listener);
    return c->num_requests;
}

/* The value of header `name` in a captured request head, or "" (static buffer). */
static const char *header(const char *request, const char *name)
{
    static char value[8192];
    value[0] = '\0';
    size_t length = strlen(name);
    for (const char *line = strstr(request, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, name, length) == 0 && line[2 + length] == ':') {
            const char *start = line + 3 + length, *end = strstr(start, "\r\n");
            while (*start == ' ')
                start++;
            snprintf(value, sizeof value, "%.*s", (int)(end - start), start);
            break;
        }
    }
    return value;
}

static const char ok_response[] =
    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/*
 * Send `curl`'s request for `url` to the capture listener instead of the
 * host it names (as a resolver would), and return its Authorization.
 */
static const char *authorization_for(CURL *curl, const char *host, const char *url)
{
    static char request[16384];
    struct capture c;
    capture_start(&c, ok_response);
    char connect_to[256];
    snprintf(connect_to, sizeof connect_to, "%s:80:127.0.0.1:%d", host, c.port);
    struct curl_slist *route = curl_slist_append(NULL, connect_to);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CONNECT_TO, route);
    CURLcode cc = curl_easy_perform(curl);
    CHECK_EQ(capture_stop(&c), 1);
    if (cc != CURLE_OK) fprintf(stderr, "    %s: %s\n", url, curl_easy_strerror(cc));
    CHECK(cc == CURLE_OK);
    curl_easy_setopt(curl, CURLOPT_CONNECT_TO, NULL);
    curl_slist_free_all(route);
    memcpy(request, c.requests[0], sizeof request);
    return request;
}

static void expect_signature(const char *request, const char *want)
{
    const char *got = header(request, "Authorization");
    if (strcmp(got, want) != 0) fprintf(stderr, "    got  %s\n    want %s\n", got, want);
    CHECK(strcmp(got, want) == 0);
}

/*
 * From AWS's SigV4 test suite ("aws-sig-v4-test-suite", published with
 * the AWS General Reference, "Signature Version 4 test suite"; Apache
 * 2.0): the credentials, date, region and service all of its cases
 * use, and the expected Authorization headers of the cases below.
 */
#define SUITE_KEY_ID "AKIDEXAMPLE"
#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_DATE "X-Amz-Date: 20150830T123600Z"
#define SUITE_CREDENTIAL                                                                           \
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
/* post-sts-token: the suite's example session token */
#define SUITE_TOKEN                                                                                \
    "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfp"   \
    "SPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQ"   \
    "DYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+s"   \
    "cqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA=="

/*
 * libcurl 7.88 takes the request time from an X-Amz-Date header the
 * request already carries (it then sends the header twice, with the same
 * value), so a fixed date makes its signatures comparable with the
 * published ones.  Cases that do not apply, with the reason:
 * the get-vanilla-query-order cases (libcurl 7.88 signs the query as given, not
 * sorted; larder's S3 GETs have no query), get-header-key-duplicate
 * (libcurl lists a repeated header once per copy instead of joining the
 * values; larder never repeats a header), the normalize-path cases and get-utf8
 * (double encoding is for services other than S3).
 */
TEST(s3_sigv4_published_vectors)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *curl = curl_easy_init();
    CHECK(curl != NULL);
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:service");
    curl_easy_setopt(curl, CURLOPT_USERNAME, SUITE_KEY_ID);
    curl_easy_setopt(curl, CURLOPT_PASSWORD, SUITE_SECRET);
    const char *host = "example.amazonaws.com", *url = "http://example.amazonaws.com/";

    /* get-vanilla */
    struct curl_slist *headers = curl_slist_append(NULL, SUITE_DATE);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    expect_signature(authorization_for(curl, host, url),
                     SUITE_CREDENTIAL "SignedHeaders=host;x-amz-date, "
                                      "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d"
                                      "9b8aae1d763fbf31");
    curl_slist_free_all(headers);

    /* get-header-value-trim: values trimmed, inner runs of spaces kept inside quotes */
    headers = curl_slist_append(NULL, SUITE_DATE);
    headers = curl_slist_append(headers, "My-Header1:  value1");
    headers = curl_slist_append(headers, "My-Header2: \"a   b   c\"");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    expect_signature(authorization_for(curl, host, url),
                     SUITE_CREDENTIAL "SignedHeaders=host;my-header1;my-header2;x-amz-date, "
                                      "Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b36705"
                                      "5dee359757a9c736");
    curl_slist_free_all(headers);

    /* post-sts-token/post-sts-header-before: the session token is signed */
    headers = curl_slist_append(NULL, SUITE_DATE);
    headers = curl_slist_append(headers, "X-Amz-Security-Token: " SUITE_TOKEN);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "POST");
    expect_signature(authorization_for(curl, host, url),
                     SUITE_CREDENTIAL "SignedHeaders=host;x-amz-date;x-amz-security-token, "
                                      "Signature=85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836"
                                      "c64533a82be05ead");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    curl_global_cleanup();
}

/*
 * From the Amazon S3 API Reference, "Signature Calculations for the
 * Authorization Header: Transferring Payload in a Single Chunk (AWS
 * Signature Version 4)", example "GET Object": the first 10 bytes of
 * examplebucket/test.txt.
 */
#define S3_DOC_KEY_ID "AKIAIOSFODNN7EXAMPLE"
#define S3_DOC_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define S3_DOC_DATE "x-amz-date: 20130524T000000Z"
#define S3_DOC_CREDENTIAL                                                                          \
    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* larder's own s3 handle for `url` on AWS's global endpoint, virtual-host style */
static struct larder__s3 *open_doc_example(const char *url)
{
    clean_environment();
    setenv("AWS_ACCESS_KEY_ID", S3_DOC_KEY_ID, 1);
    setenv("AWS_SECRET_ACCESS_KEY", S3_DOC_SECRET, 1);
    struct larder__s3_options options = {.endpoint = "http://s3.amazonaws.com",
                                         .addressing = LARDER__S3_ADDRESSING_VIRTUAL};
    struct larder__s3 *s3;
    CHECK_EQ(larder__s3_open(&s3, url, &options), 0);
    CHECK(larder__s3_signed(s3));
    CHECK(strcmp(larder__s3_region(s3), "us-east-1") == 0);
    return s3;
}

/* larder__s3_headers(s3) plus `extra`; caller frees */
static struct curl_slist *headers_plus(const struct larder__s3 *s3, const char *extra)
{
    struct curl_slist *list = curl_slist_append(NULL, extra);
    for (const struct curl_slist *h = larder__s3_headers(s3); h; h = h->next)
        list = curl_slist_append(list, h->data);
    return list;
}

TEST(s3_sigv4_s3_requests)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *host = "examplebucket.s3.amazonaws.com";

    /* the published example, signed by libcurl with larder's settings (the
     * example signs Range and the empty body's hash; larder's own headers
     * are checked next) */
    struct larder__s3 *s3 = open_doc_example("s3://examplebucket/test.txt");
    CHECK(strcmp(larder__s3_http_url(s3), "http://examplebucket.s3.amazonaws.com/test.txt") == 0);
    CURL *curl = curl_easy_init();
    larder__s3_apply(s3, curl);
    struct curl_slist *headers = curl_slist_append(NULL, "Range: bytes=0-9");
    headers = curl_slist_append(headers, "x-amz-content-sha256: " EMPTY_SHA256);
    headers = curl_slist_append(headers, S3_DOC_DATE);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    expect_signature(authorization_for(curl, host, larder__s3_http_url(s3)),
                     S3_DOC_CREDENTIAL "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                                       "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd"
                                       "91039c6036bdb41");
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    larder__s3_close(s3);

    /*
     * What larder itself sends, on the same example: UNSIGNED-PAYLOAD, a
     * session token (the test suite's), Range through CURLOPT_RANGE as the
     * HTTP origin sets it (libcurl does not sign it; S3 does not ask it
     * to be).  These signatures are derived, not published: computed from
     * the canonical requests below with Python's hmac and hashlib, and
     * matching what @20minutes/s3rver's verifier accepts in tests/cli/s3.sh.
     *   GET /test.txt  host;x-amz-content-sha256;x-amz-date;x-amz-security-token
     *   GET /photos/2013%20may/cat%2Bdog.jpg  host;x-amz-content-sha256;x-amz-date
     */
    setenv("AWS_SESSION_TOKEN", SUITE_TOKEN, 1);
    struct larder__s3_options options = {.endpoint = "http://s3.amazonaws.com",
                                         .addressing = LARDER__S3_ADDRESSING_VIRTUAL};
    CHECK_EQ(larder__s3_open(&s3, "s3://examplebucket/test.txt", &options), 0);
    curl = curl_easy_init();
    larder__s3_apply(s3, curl);
    headers = headers_plus(s3, S3_DOC_DATE);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_RANGE, "0-9");
    const char *request = authorization_for(curl, host, larder__s3_http_url(s3));
    expect_signature(request, S3_DOC_CREDENTIAL
                     "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token, "
                     "Signature=9f7410c939d6d71ca2121f393d01e4b652dc94d8ba4d7c6fd056a099f467b5fa");
    CHECK(strcmp(header(request, "x-amz-content-sha256"), "UNSIGNED-PAYLOAD") == 0);
    CHECK(strcmp(header(request, "x-amz-security-token"), SUITE_TOKEN) == 0);
    CHECK(strcmp(header(request, "Range"), "bytes=0-9") == 0);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    larder__s3_close(s3);

    /* a key that needs percent-encoding is signed as S3 canonicalizes it */
    s3 = open_doc_example("s3://examplebucket/photos/2013 may/cat+dog.jpg");
    CHECK(strcmp(larder__s3_http_url(s3),
                 "http://examplebucket.s3.amazonaws.com/photos/2013%20may/cat%2Bdog.jpg") == 0);
    curl = curl_easy_init();
    larder__s3_apply(s3, curl);
    headers = headers_plus(s3, S3_DOC_DATE);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    request = authorization_for(curl, host, larder__s3_http_url(s3));
    CHECK(strncmp(request, "GET /photos/2013%20may/cat%2Bdog.jpg HTTP/1.1\r\n", 47) == 0);
    expect_signature(request, S3_DOC_CREDENTIAL
                     "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                     "Signature=3f7d3aecb8c2865368dd9f2d184cf8e57175aa98285e1cefac1413de748e7132");
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    larder__s3_close(s3);
    curl_global_cleanup();
}

/* ---- through the origin ----------------------------------------------------------- */

TEST(s3_origin_requests)
{
    clean_environment();
    setenv("AWS_ACCESS_KEY_ID", "AKIDORIGIN", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "originsecret", 1);
    setenv("AWS_REGION", "eu-central-1", 1);
    struct capture c;
    capture_start(&c, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 4-9/100\r\n"
                      "Content-Length: 6\r\nConnection: close\r\n\r\nabcdef");
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", c.port);
    setenv("LARDER_S3_ENDPOINT", endpoint, 1);

    CHECK(larder__is_remote("s3://bucket/set/index.larder"));
    struct larder__source *o;
    CHECK_EQ(larder__source_open(&o, "s3://bucket/set/shard 1.tar", NULL), 0);
    CHECK(strcmp(o->name, "s3://bucket/set/shard 1.tar") == 0);
    CHECK(strcmp(o->ops->kind, "s3") == 0);
    char buf[6];
    CHECK_EQ(larder__source_read(o, buf, 6, 4, 0), LARDER__FROM_ORIGIN);
    CHECK(memcmp(buf, "abcdef", 6) == 0);
    larder__source_close(o);
    CHECK_EQ(capture_stop(&c), 1);
    const char *request = c.requests[0];
    CHECK(strncmp(request, "GET /bucket/set/shard%201.tar HTTP/1.1\r\n", 40) == 0);
    CHECK(strcmp(header(request, "Range"), "bytes=4-9") == 0);
    CHECK(strcmp(header(request, "x-amz-content-sha256"), "UNSIGNED-PAYLOAD") == 0);
    CHECK(strncmp(header(request, "Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDORIGIN/",
                  39) == 0);
    CHECK(strstr(header(request, "Authorization"),
                 "/eu-central-1/s3/aws4_request, "
                 "SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=") != NULL);

    /* 403: one request, no retries, an error naming the s3:// URL */
    capture_start(&c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", c.port);
    setenv("LARDER_S3_ENDPOINT", endpoint, 1);
    CHECK_EQ(larder__source_open(&o, "s3://bucket/set/a.tar", NULL), 0);
    CHECK_EQ(larder__source_read(o, buf, 6, 4, 0), -EACCES);
    CHECK(strstr(larder_errmsg(), "s3://bucket/set/a.tar: HTTP status 403") != NULL);
    larder__source_close(o);
    CHECK_EQ(capture_stop(&c), 1);

    /* a bad s3:// URL fails at open, naming it */
    CHECK_EQ(larder__source_open(&o, "s3://bucket/", NULL), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "s3://bucket/") != NULL);
}

TEST(s3_resolve_names)
{
    const char *cases[][3] = {
        {"s3://b/p/index.larder", "shard-000.tar", "s3://b/p/shard-000.tar"},
        {"s3://b/index.larder", "x/a.tar", "s3://b/x/a.tar"},
        {"s3://b/p/q/index.larder", "s3://other/a.tar", "s3://other/a.tar"},
        {"s3://b/p/index.larder", "https://cdn/a.tar", "https://cdn/a.tar"},
        {"s3://b", "a.tar", "s3://b/a.tar"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *got = larder__resolve(cases[i][0], cases[i][1]);
        if (strcmp(got, cases[i][2]) != 0) fprintf(stderr, "    %s -> %s\n", cases[i][1], got);
        CHECK(strcmp(got, cases[i][2]) == 0);
        free(got);
    }
}
