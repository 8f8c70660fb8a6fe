/*
 * test_pack_input.c - the packing input interface (src/pack/input.h)
 * through an input defined here: an in-memory one, listed into a layout,
 * written by the packer and read back through the public reader API.
 * What the reader must return is written out below, not derived from
 * the packer.  Also: an input whose listing fails part way leaves no
 * sample behind and is closed.
 */
#include "larder_pack.h"
#include "pack.h"
#include "test.h"

#include <errno.h>

/* ---- the in-memory input ------------------------------------------------ */

struct memory_field {
    const char *name;
    const char *data;
    size_t size;
};

struct memory_sample {
    const char *key;
    struct memory_field fields[2];
};

/* Two samples of two fields; alpha's "cls" is empty. */
static const struct memory_sample memory_samples[] = {
    {"alpha", {{"txt", "hello, larder", 13}, {"cls", "", 0}}},
    {"beta", {{"txt", "second sample!", 14}, {"cls", "7\n", 2}}},
};

struct memory_input {
    struct larder__pack_input base;
    int fail_after; /* fail the listing after this many samples; -1: never */
};

static int memory_closed;

static int memory_list(struct larder__pack_input *input, larder__pack_sample_fn on_sample,
                       void *context)
{
    const struct memory_input *memory = (const struct memory_input *)input;
    for (uint64_t s = 0; s < 2; s++) {
        if ((int)s == memory->fail_after) return -EIO;
        struct larder__pack_field fields[2];
        for (uint64_t f = 0; f < 2; f++)
            fields[f] = (struct larder__pack_field){.name = memory_samples[s].fields[f].name,
                                                    .size = memory_samples[s].fields[f].size,
                                                    .locator = {s, f}};
        const char *key = memory_samples[s].key;
        int rc = on_sample(context, key, strlen(key), fields, 2);
        if (rc < 0) return rc;
    }
    return 0;
}

static int memory_read(struct larder__pack_input *input, const struct larder__pack_field *field,
                       uint64_t offset, void *buf, size_t length)
{
    (void)input;
    const struct memory_field *source =
        &memory_samples[field->locator[0]].fields[field->locator[1]];
    CHECK(offset <= source->size && length <= source->size - offset);
    memcpy(buf, source->data + offset, length);
    return 0;
}

static void memory_close(struct larder__pack_input *input)
{
    memory_closed++;
    free(input->name);
    free(input);
}

static const struct larder__pack_input_ops memory_ops = {
    .list = memory_list, .read = memory_read, .close = memory_close};

static struct larder__pack_input *memory_input_new(int fail_after)
{
    struct memory_input *memory = calloc(1, sizeof *memory);
    CHECK(memory != NULL);
    memory->base.ops = &memory_ops;
    memory->base.name = strdup("memory");
    memory->fail_after = fail_after;
    return &memory->base;
}

/* ---- tests -------------------------------------------------------------- */

/* Field `name` of sample `key` reads back as exactly `size` bytes of `want`. */
static void check_field(larder_dataset *d, const char *key, const char *name, const char *want,
                        size_t size)
{
    int64_t id = larder_find_key(d, key);
    CHECK(id >= 0);
    int f = larder_find_field(d, (uint64_t)id, name);
    CHECK(f >= 0);
    char buf[64];
    memset(buf, 0xa5, sizeof buf);
    CHECK_EQ(larder_read_field(d, (uint64_t)id, (uint32_t)f, buf, sizeof buf), size);
    CHECK(memcmp(buf, want, size) == 0);
}

TEST(pack_input_in_memory)
{
    static const int formats[] = {LARDER_FORMAT_TAR, LARDER_FORMAT_FLAT};
    for (int i = 0; i < 2; i++) {
        memory_closed = 0;
        struct larder__pack_layout *layout;
        CHECK_EQ(larder__pack_layout_new(&layout), 0);
        CHECK_EQ(larder__pack_layout_add_input(layout, memory_input_new(-1)), 0);
        CHECK_EQ(larder__pack_layout_num_samples(layout), 2);

        char out[256];
        snprintf(out, sizeof out, "%s", test_path(i == 0 ? "tar" : "flat"));
        larder_pack_options options = {
            .version = LARDER_PACK_OPTIONS_VERSION, .format = formats[i], .jobs = 2};
        larder_pack_result result;
        CHECK_EQ(larder__pack_write(layout, out, &options, &result), 0);
        CHECK_EQ(result.num_samples, 2);
        CHECK_EQ(result.num_shards, 1);
        CHECK_EQ(memory_closed, 0);
        larder__pack_layout_free(layout);
        CHECK_EQ(memory_closed, 1);

        char index[300];
        snprintf(index, sizeof index, "%s/index.larder", out);
        larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION, .verify_checksums = 1};
        larder_dataset *d;
        CHECK_EQ(larder_open(&d, index, &o), 0);
        CHECK_EQ(larder_num_samples(d), 2);
        CHECK_EQ(larder_verify(d, NULL, NULL, NULL), 0);
        check_field(d, "alpha", "txt", "hello, larder", 13);
        check_field(d, "alpha", "cls", "", 0);
        check_field(d, "beta", "txt", "second sample!", 14);
        check_field(d, "beta", "cls", "7\n", 2);
        larder_close(d);
    }
}

/* A listing that fails after one sample: that sample is dropped, the
 * input closed, and the layout still takes a good input after it. */
TEST(pack_input_failed_listing)
{
    memory_closed = 0;
    struct larder__pack_layout *layout;
    CHECK_EQ(larder__pack_layout_new(&layout), 0);
    CHECK_EQ(larder__pack_layout_add_input(layout, memory_input_new(1)), -EIO);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 0);
    CHECK_EQ(memory_closed, 1);
    CHECK_EQ(larder__pack_layout_add_input(layout, memory_input_new(-1)), 0);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 2);
    const char *key;
    struct larder__pack_input *input;
    const struct larder__pack_field *fields;
    uint32_t num_fields;
    larder__pack_layout_sample(layout, 1, &key, &input, &fields, &num_fields);
    CHECK(strcmp(key, "beta") == 0);
    CHECK_EQ(num_fields, 2);
    CHECK(strcmp(fields[1].name, "cls") == 0);
    CHECK_EQ(fields[1].size, 2);
    larder__pack_layout_free(layout);
    CHECK_EQ(memory_closed, 2);
}
