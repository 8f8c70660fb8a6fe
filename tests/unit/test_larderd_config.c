/*
 * test_larderd_config.c - larderd's options (src/larderd/config.c): good
 * argument vectors into the struct, bad ones refused with the exact
 * message larderd prints, and what the options name (secret, members,
 * which member this is) loaded into the daemon.
 */
#include "daemon_fixture.h"
#include "test.h"

#include <errno.h>

/* Parse a NULL-terminated vector (after "larderd") over the defaults. */
static int parse(struct larderd_config *config, char *error, const char *const *args)
{
    char *argv[256] = {"larderd"};
    int argc = 1;
    while (args[argc - 1])
        argv[argc] = (char *)args[argc - 1], argc++;
    argv[argc] = NULL;
    larderd_config_defaults(config);
    return larderd_config_parse(config, argc, argv, error, CONFIG_ERROR_SIZE);
}

TEST(larderd_config_good)
{
    unsetenv("LARDER_SOCKET");
    struct larderd_config c;
    char error[CONFIG_ERROR_SIZE];
    const char *args[] = {"--cache",
                          "/c",
                          "--socket",
                          "/s.sock",
                          "--listen",
                          "h:7461",
                          "--peers",
                          "a:1,b:2",
                          "--self",
                          "a:1",
                          "--secret-file",
                          "/k",
                          "--jobs",
                          "8",
                          "--metrics",
                          "m:9",
                          "--warm",
                          "--warm-rate",
                          "12.5",
                          "--borrow-size",
                          "1G",
                          "--cache-size",
                          "64K",
                          "--allow",
                          "/data",
                          "--allow",
                          "s3://b/",
                          "--allow-uid",
                          "1001",
                          "--allow-gid",
                          "2002",
                          "--insecure-peers",
                          "--max-connections",
                          "10",
                          "--idle-timeout",
                          "5",
                          "--connection-memory",
                          "1M",
                          NULL};
    CHECK_EQ(parse(&c, error, args), LARDERD_CONFIG_RUN);
    CHECK(strcmp(c.cache_dir, "/c") == 0 && strcmp(c.socket_path, "/s.sock") == 0);
    CHECK(strcmp(c.listen_address, "h:7461") == 0 && strcmp(c.peers, "a:1,b:2") == 0);
    CHECK(strcmp(c.self_name, "a:1") == 0 && strcmp(c.secret_file, "/k") == 0);
    CHECK(strcmp(c.metrics_address, "m:9") == 0);
    CHECK_EQ(c.jobs, 8);
    CHECK(c.warm && c.warm_rate == 12.5 && c.insecure_peers);
    CHECK(c.borrow_capacity == 1ull << 30 && c.cache_capacity == 65536);
    CHECK_EQ(c.num_allow, 2);
    CHECK(strcmp(c.allow[0], "/data") == 0 && strcmp(c.allow[1], "s3://b/") == 0 && !c.allow[2]);
    CHECK(c.num_allow_uids == 1 && c.allow_uids[0] == 1001);
    CHECK(c.num_allow_gids == 1 && c.allow_gids[0] == 2002);
    CHECK_EQ(c.max_connections, 10);
    CHECK_EQ(c.idle_timeout_ms, 5000);
    CHECK(c.connection_budget == 1u << 20);
    CHECK(c.uid == getuid() && c.gid == getgid());
}

TEST(larderd_config_defaults)
{
    setenv("LARDER_SOCKET", "/env.sock", 1);
    struct larderd_config c;
    char error[CONFIG_ERROR_SIZE];
    const char *args[] = {"--cache", "/c", NULL};
    CHECK_EQ(parse(&c, error, args), LARDERD_CONFIG_RUN);
    CHECK(strcmp(c.socket_path, "/env.sock") == 0);
    CHECK(!c.listen_address && !c.peers && !c.secret_file && !c.warm && !c.num_allow);
    CHECK_EQ(c.jobs, 64);
    CHECK_EQ(c.max_connections, 1024);
    CHECK_EQ(c.idle_timeout_ms, 60000);
    CHECK(c.connection_budget == 64u << 20);
    CHECK(c.cache_capacity == 0 && c.borrow_capacity == 0 && c.warm_rate == 0);
    /* parsed again: getopt starts over */
    const char *again[] = {"--cache", "/d", "--jobs", "3", NULL};
    CHECK_EQ(parse(&c, error, again), LARDERD_CONFIG_RUN);
    CHECK(strcmp(c.cache_dir, "/d") == 0 && c.jobs == 3);
    const char *help[] = {"--cache", "/d", "--help", NULL};
    CHECK_EQ(parse(&c, error, help), LARDERD_CONFIG_HELP);
}

TEST(larderd_config_bad)
{
    unsetenv("LARDER_SOCKET");
    static const struct {
        const char *args[8];
        const char *message;
    } cases[] = {
        {{"--cache", "/c", "--socket", "/s", "--borrow-size", "lots"}, "bad --borrow-size 'lots'"},
        {{"--cache", "/c", "--socket", "/s", "--cache-size", "99999999999999999999G"},
         "bad --cache-size '99999999999999999999G'"},
        {{"--cache", "/c", "--socket", "/s", "--connection-memory", "1K"},
         "bad --connection-memory '1K' (at least 64K)"},
        {{"--cache", "/c", "--socket", "/s", "--jobs", "0"}, "bad --jobs '0' (1-4096)"},
        {{"--cache", "/c", "--socket", "/s", "--jobs", "many"}, "bad --jobs 'many' (1-4096)"},
        {{"--cache", "/c", "--socket", "/s", "--warm-rate", "fast"},
         "bad --warm-rate 'fast' (MB/s, a decimal number)"},
        {{"--cache", "/c", "--socket", "/s", "--allow-uid", "-1"}, "bad --allow-uid '-1'"},
        {{"--cache", "/c", "--socket", "/s", "--allow-gid", "4294967295"},
         "bad --allow-gid '4294967295'"},
        {{"--cache", "/c", "--socket", "/s", "--max-connections", "0"},
         "bad --max-connections '0'"},
        {{"--cache", "/c", "--socket", "/s", "--idle-timeout", "0.5"},
         "bad --idle-timeout '0.5' (whole seconds, at least 1)"},
        {{"--cache", "/c", "--socket", "/s", "--frobnicate"}, "unrecognized option '--frobnicate'"},
        {{"--cache", "/c", "--socket"}, "option '--socket' needs a value"},
        {{"--cache", "/c", "--socket", "/s", "extra"}, "unexpected argument 'extra'"},
        {{"--cache", "/c"},
         "nothing to listen on: give --socket (or set LARDER_SOCKET) and/or --listen"},
        {{"--socket", "/s"}, ""}, /* no --cache: the usage says it */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct larderd_config c;
        char error[CONFIG_ERROR_SIZE] = "unset";
        int rc = parse(&c, error, cases[i].args);
        if (rc != -EINVAL || strcmp(error, cases[i].message) != 0)
            fprintf(stderr, "    case %zu: %d '%s'\n", i, rc, error);
        CHECK_EQ(rc, -EINVAL);
        CHECK(strcmp(error, cases[i].message) == 0);
    }
}

TEST(larderd_config_limits)
{
    struct larderd_config c;
    char error[CONFIG_ERROR_SIZE];
    const char *args[4 + 2 * (MAX_ALLOWED_IDS + 1) + 1] = {"--cache", "/c", "--socket", "/s"};
    for (int i = 0; i <= MAX_ALLOWED_IDS; i++) {
        args[4 + 2 * i] = "--allow-uid";
        args[5 + 2 * i] = "7";
    }
    CHECK_EQ(parse(&c, error, args), -EINVAL);
    CHECK(strcmp(error, "at most 64 --allow-uid and 64 --allow-gid") == 0);
    args[4 + 2 * MAX_ALLOWED_IDS] = NULL;
    CHECK_EQ(parse(&c, error, args), LARDERD_CONFIG_RUN);
    CHECK_EQ(c.num_allow_uids, MAX_ALLOWED_IDS);
}

/* Parse and load: 0 or -1 with the message in error. */
static int load(struct larderd *d, char *error, const char *const *args)
{
    larderd_init(d);
    say_quietly(true);
    if (parse(&d->config, error, args) != LARDERD_CONFIG_RUN) return -2;
    return larderd_config_load(d, error, CONFIG_ERROR_SIZE);
}

TEST(larderd_config_load)
{
    char secret_file[4096], hosts[4096], error[CONFIG_ERROR_SIZE];
    snprintf(secret_file, sizeof secret_file, "%s", test_path("secret"));
    snprintf(hosts, sizeof hosts, "%s", test_path("hosts"));
    test_write_file(secret_file, "s3cret\n\n", 8);
    test_write_file(hosts, "n1:7461\nn2:7461\nn3\n", 19);
    struct larderd d;
    const char *args[] = {"--cache",          "/c",  "--listen",      "n2:7461",
                          "--hostfile",       hosts, "--secret-file", secret_file,
                          "--insecure-peers", NULL};
    CHECK_EQ(load(&d, error, args), 0);
    CHECK(strcmp(d.secret, "s3cret") == 0); /* without its trailing blanks */
    CHECK_EQ(d.members.count, 3);
    CHECK(strcmp(d.members.names[2], "n3:7461") == 0); /* the port of --listen */
    CHECK_EQ(d.self, 1);
    CHECK(strcmp(d.self_name, "n2:7461") == 0);
    CHECK(!d.config.insecure_peers); /* the secret wins */
    larderd_free(&d);

    const char *stranger[] = {"--cache", "/c", "--listen", "n9:7461", "--hostfile", hosts, NULL};
    CHECK_EQ(load(&d, error, stranger), -EINVAL);
    CHECK(strcmp(error, "this node (n9:7461) is not among the members; give --self") == 0);
    larderd_free(&d);

    const char *no_secret[] = {
        "--cache", "/c", "--socket", "/s", "--secret-file", test_path("nothing"), NULL};
    CHECK_EQ(load(&d, error, no_secret), -EINVAL);
    CHECK(strncmp(error, "cannot read a secret from ", 26) == 0);
    larderd_free(&d);

    unsetenv("SLURM_JOB_NODELIST");
    const char *slurm[] = {"--cache", "/c", "--socket", "/s", "--slurm", NULL};
    CHECK_EQ(load(&d, error, slurm), -EINVAL);
    CHECK(strcmp(error, "--slurm: SLURM_JOB_NODELIST is not set") == 0);
    larderd_free(&d);

    const char *alone[] = {"--cache", "/c", "--socket", "/s", NULL};
    CHECK_EQ(load(&d, error, alone), 0);
    CHECK(d.members.count == 0 && d.self == SIZE_MAX && !d.secret && !d.self_name);
    larderd_free(&d);
}

/* Parse a configuration text over the defaults: 0 or -EINVAL with the message in error. */
static int parse_text(struct larderd_config *config, char *error, const char *text, char *copy)
{
    strcpy(copy, text);
    larderd_config_defaults(config);
    return larderd_config_parse_text(config, copy, "larderd.conf", error, CONFIG_ERROR_SIZE);
}

TEST(larderd_config_file_good)
{
    unsetenv("LARDER_SOCKET");
    struct larderd_config c;
    char error[CONFIG_ERROR_SIZE], copy[2048];
    const char *text = "# the node daemon\n"
                       "\n"
                       "cache = /nvme/larder\n"
                       "  socket=/run/larder/larderd.sock  \r\n"
                       "listen = 0.0.0.0:7461\n"
                       "\t# indented comment\n"
                       "peers = a:1,b:2\n"
                       "self = a:1\n"
                       "secret-file = /etc/larder/secret\n"
                       "jobs = 8\n"
                       "metrics = 127.0.0.1:9461\n"
                       "warm = yes\n"
                       "warm-rate = 12.5\n"
                       "borrow-size = 1G\n"
                       "cache-size = 2T\n"
                       "allow = /lustre/datasets\n"
                       "allow = https://data.example.org/a b/\n"
                       "allow-uid = 1001\n"
                       "allow-uid = 1002\n"
                       "allow-gid = 2002\n"
                       "insecure-peers = false\n"
                       "slurm = off\n"
                       "max-connections = 10\n"
                       "idle-timeout = 5\n"
                       "connection-memory = 1M"; /* no newline at the end */
    CHECK_EQ(parse_text(&c, error, text, copy), 0);
    CHECK(strcmp(c.cache_dir, "/nvme/larder") == 0);
    CHECK(strcmp(c.socket_path, "/run/larder/larderd.sock") == 0);
    CHECK(strcmp(c.listen_address, "0.0.0.0:7461") == 0 && strcmp(c.peers, "a:1,b:2") == 0);
    CHECK(strcmp(c.self_name, "a:1") == 0 && strcmp(c.secret_file, "/etc/larder/secret") == 0);
    CHECK(strcmp(c.metrics_address, "127.0.0.1:9461") == 0);
    CHECK(c.jobs == 8 && c.warm && c.warm_rate == 12.5 && !c.insecure_peers && !c.slurm);
    CHECK(c.borrow_capacity == 1ull << 30 && c.cache_capacity == 2ull << 40);
    CHECK_EQ(c.num_allow, 2);
    CHECK(strcmp(c.allow[0], "/lustre/datasets") == 0);
    CHECK(strcmp(c.allow[1], "https://data.example.org/a b/") == 0 && !c.allow[2]);
    CHECK(c.num_allow_uids == 2 && c.allow_uids[0] == 1001 && c.allow_uids[1] == 1002);
    CHECK(c.num_allow_gids == 1 && c.allow_gids[0] == 2002);
    CHECK(c.max_connections == 10 && c.idle_timeout_ms == 5000 && c.connection_budget == 1u << 20);

    /* an empty file changes nothing */
    CHECK_EQ(parse_text(&c, error, "", copy), 0);
    CHECK(!c.cache_dir && c.jobs == 64);
    CHECK_EQ(parse_text(&c, error, "\n\n# nothing\n", copy), 0);
}

TEST(larderd_config_file_bad)
{
    static const struct {
        const char *text;
        const char *message;
    } cases[] = {
        {"cache = /c\njobs = 0\n", "larderd.conf:2: bad --jobs '0' (1-4096)"},
        {"cache = /c\n\n# x\ncache-size = lots\n", "larderd.conf:4: bad --cache-size 'lots'"},
        {"frobnicate = 1\n", "larderd.conf:1: unknown option 'frobnicate'"},
        {"help = true\n", "larderd.conf:1: unknown option 'help'"},
        {"--cache = /c\n", "larderd.conf:1: unknown option '--cache'"},
        {"cache /c\n", "larderd.conf:1: expected 'key = value', not 'cache /c'"},
        {"  = /c\n", "larderd.conf:1: no key before '='"},
        {"cache =\n", "larderd.conf:1: 'cache' needs a value"},
        {"cache = /c\ncache = /d\n", "larderd.conf:2: 'cache' again (line 1 set it)"},
        {"warm = maybe\n", "larderd.conf:1: 'warm' is true or false, not 'maybe'"},
        {"config = /etc/other.conf\n",
         "larderd.conf:1: 'config' is an option of the command line only"},
        {"allow-uid = -1\n", "larderd.conf:1: bad --allow-uid '-1'"},
        {"idle-timeout = 0.5 # seconds\n",
         "larderd.conf:1: bad --idle-timeout '0.5 # seconds' (whole seconds, at least 1)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct larderd_config c;
        char error[CONFIG_ERROR_SIZE] = "unset", copy[512];
        int rc = parse_text(&c, error, cases[i].text, copy);
        if (rc != -EINVAL || strcmp(error, cases[i].message) != 0)
            fprintf(stderr, "    case %zu: %d '%s'\n", i, rc, error);
        CHECK_EQ(rc, -EINVAL);
        CHECK(strcmp(error, cases[i].message) == 0);
    }
}

TEST(larderd_config_file_then_command_line)
{
    unsetenv("LARDER_SOCKET");
    char path[4096], error[CONFIG_ERROR_SIZE];
    snprintf(path, sizeof path, "%s", test_path("larderd.conf"));
    const char *text = "cache = /file-cache\nsocket = /file.sock\njobs = 8\nwarm = true\n"
                       "allow = /a\nallow = /b\nallow-gid = 5\n";
    test_write_file(path, text, strlen(text));
    char *argv[] = {"larderd", "--jobs", "4", "--config", path, "--allow", "/c", NULL};
    int argc = 7;
    CHECK(strcmp(larderd_config_file_option(argc, argv), path) == 0);
    struct larderd_config c;
    larderd_config_defaults(&c);
    char *file_text;
    CHECK_EQ(larderd_config_read(&c, path, &file_text, error, sizeof error), 0);
    CHECK_EQ(larderd_config_parse(&c, argc, argv, error, sizeof error), LARDERD_CONFIG_RUN);
    CHECK(strcmp(c.config_file, path) == 0);
    CHECK(strcmp(c.cache_dir, "/file-cache") == 0 && strcmp(c.socket_path, "/file.sock") == 0);
    CHECK(c.jobs == 4 && c.warm); /* the command line wins; the rest is the file's */
    CHECK(c.num_allow == 1 && strcmp(c.allow[0], "/c") == 0 && !c.allow[1]); /* replaced */
    CHECK(c.num_allow_gids == 1 && c.allow_gids[0] == 5); /* not given here: the file's */
    free(file_text);

    /* --config=FILE, and none */
    char option[4200];
    snprintf(option, sizeof option, "--config=%s", path);
    char *equals[] = {"larderd", option, NULL};
    CHECK(strcmp(larderd_config_file_option(2, equals), path) == 0);
    char *none[] = {"larderd", "--cache", "/c", NULL};
    CHECK(larderd_config_file_option(3, none) == NULL);

    /* a file that is not there, one too large */
    larderd_config_defaults(&c);
    CHECK_EQ(larderd_config_read(&c, test_path("missing.conf"), &file_text, error, sizeof error),
             -EINVAL);
    CHECK(strstr(error, "cannot read ") == error && strstr(error, ": No such file or directory"));
    CHECK(file_text == NULL);
    char *big = malloc(CONFIG_MAX_FILE + 10);
    memset(big, '#', CONFIG_MAX_FILE + 10);
    test_write_file(path, big, CONFIG_MAX_FILE + 10);
    free(big);
    CHECK_EQ(larderd_config_read(&c, path, &file_text, error, sizeof error), -EINVAL);
    CHECK(strstr(error, ": not a configuration file (over 64 KB, or a NUL byte)") != NULL);
}
