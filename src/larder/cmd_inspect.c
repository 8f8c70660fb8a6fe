/*
 * cmd_inspect.c - `larder inspect`: a dataset's summary, or one sample's
 * layout, as text or JSON; the whole index is validated first.
 */
#include "cli.h"
#include "ui.h"

#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char inspect_help[] =
    "usage: larder inspect INDEX [--json] [--sample ID|KEY]\n"
    "\n"
    "Summarize a dataset, or show one sample's layout.  A sample is named by its\n"
    "key, or by its id (0-based position) when no sample has that key.\n";

static void shape_text(const larder_field_info *f, char *out, size_t size)
{
    size_t used = (size_t)snprintf(out, size, "(");
    for (uint32_t d = 0; d < f->ndim && used < size; d++)
        used += (size_t)snprintf(out + used, size - used, "%s%" PRIu64, d ? ", " : "", f->shape[d]);
    if (used < size) snprintf(out + used, size - used, "%s)", f->ndim == 1 ? "," : "");
}

static int inspect_sample(larder_dataset *d, const char *what, int json)
{
    int64_t id = resolve_sample(d, what);
    if (id < 0) return 1;
    larder_sample_info s;
    int rc = larder_sample_info_get(d, (uint64_t)id, &s);
    if (rc < 0) return fail(rc);
    if (json) {
        printf("{\"id\": %" PRId64 ", \"key\": ", id);
        json_string(stdout, s.key);
        printf(", \"shard\": %u, \"shard_name\": ", s.shard);
        json_string(stdout, s.shard_name);
        printf(", \"offset\": %" PRIu64 ", \"length\": %" PRIu64 ", \"checksum\": \"%016" PRIx64
               "\", \"fields\": [",
               s.offset, s.length, s.checksum);
    } else {
        printf("sample     %" PRId64 "\nkey        %s\nshard      %u (%s)\nbytes      %" PRIu64
               "+%" PRIu64 "\nchecksum   %016" PRIx64 " (xxh3-64)\nfields     %u\n",
               id, s.key, s.shard, s.shard_name, s.offset, s.length, s.checksum, s.num_fields);
        printf("  %-20s %12s %12s  %-8s %s\n", "name", "offset", "length", "dtype", "shape");
    }
    for (uint32_t f = 0; f < s.num_fields; f++) {
        larder_field_info fi;
        if ((rc = larder_field_info_get(d, (uint64_t)id, f, &fi)) < 0) return fail(rc);
        char shape[1024] = "";
        if (fi.dtype) shape_text(&fi, shape, sizeof shape);
        if (json) {
            printf("%s{\"name\": ", f ? ", " : "");
            json_string(stdout, fi.name);
            printf(", \"offset\": %" PRIu64 ", \"length\": %" PRIu64 ", \"dtype\": \"%s\"",
                   fi.offset, fi.length, larder_dtype_name(fi.dtype));
            if (fi.dtype) {
                printf(", \"shape\": [");
                for (uint32_t k = 0; k < fi.ndim; k++)
                    printf("%s%" PRIu64, k ? ", " : "", fi.shape[k]);
                printf("]");
            }
            printf("}");
        } else {
            printf("  %-20s %12" PRIu64 " %12" PRIu64 "  %-8s %s\n", fi.name, fi.offset, fi.length,
                   larder_dtype_name(fi.dtype), shape);
        }
    }
    if (json) printf("]}\n");
    return 0;
}

/* Field names and how many samples carry each (first 64 names). */
struct field_count {
    const char *name;
    uint64_t count;
};

static int inspect_summary(larder_dataset *d, const char *url, int json)
{
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    struct field_count names[64];
    int num_names = 0;
    uint64_t min = UINT64_MAX, max = 0;
    for (uint64_t id = 0; id < info.num_samples; id++) {
        larder_sample_info s;
        int rc = larder_sample_info_get(d, id, &s);
        if (rc < 0) return fail(rc);
        if (s.length < min) min = s.length;
        if (s.length > max) max = s.length;
        for (uint32_t f = 0; f < s.num_fields; f++) {
            larder_field_info fi;
            if ((rc = larder_field_info_get(d, id, f, &fi)) < 0) return fail(rc);
            int k = 0;
            while (k < num_names && strcmp(names[k].name, fi.name) != 0)
                k++;
            if (k == num_names && num_names < 64)
                names[num_names++] = (struct field_count){fi.name, 0};
            if (k < num_names) names[k].count++;
        }
    }
    if (json) {
        printf("{\"index\": ");
        json_string(stdout, url);
        printf(", \"version\": %u, \"dataset_id\": \"%s\", \"num_samples\": %" PRIu64
               ", \"num_shards\": %" PRIu64 ", \"total_bytes\": %" PRIu64
               ", \"block_size\": %u, \"min_sample_bytes\": %" PRIu64
               ", \"max_sample_bytes\": %" PRIu64 ", \"fields\": {",
               info.version, info.dataset_id, info.num_samples, info.num_shards, info.total_bytes,
               info.block_size, min, max);
        for (int k = 0; k < num_names; k++) {
            printf("%s", k ? ", " : "");
            json_string(stdout, names[k].name);
            printf(": %" PRIu64, names[k].count);
        }
        printf("}}\n");
        return 0;
    }
    char total[32], a[32], b[32], mean[32];
    printf("index       %s\nversion     %u\ndataset id  %s\nsamples     %" PRIu64
           "\nshards      %" PRIu64
           "\nbytes       %s (samples %s to %s, mean %s)\nblock size  %u\n",
           url, info.version, info.dataset_id, info.num_samples, info.num_shards,
           human_bytes(info.total_bytes, total), human_bytes(min, a), human_bytes(max, b),
           human_bytes(info.total_bytes / info.num_samples, mean), info.block_size);
    printf("fields     ");
    for (int k = 0; k < num_names; k++)
        printf(" %s (%" PRIu64 ")%s", names[k].name, names[k].count, k + 1 < num_names ? "," : "");
    printf("\n");
    return 0;
}

int cmd_inspect(int argc, char **argv)
{
    static const struct option options[] = {{"json", no_argument, 0, 'J'},
                                            {"sample", required_argument, 0, 's'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    int json = 0, c;
    const char *sample = NULL;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'J':
            json = 1;
            break;
        case 's':
            sample = optarg;
            break;
        case 'h':
            fputs(inspect_help, stdout);
            return 0;
        default:
            return usage_error("inspect", "bad option");
        }
    }
    if (optind + 1 != argc) return usage_error("inspect", "expected one INDEX");
    larder_dataset *d;
    int rc = cli_open(&d, argv[optind], NULL);
    if (rc < 0) return fail(rc);
    /* inspect is where a person asks whether an index is sound: check all of it */
    if ((rc = larder_validate(d)) < 0) {
        larder_close(d);
        return fail(rc);
    }
    int status = sample ? inspect_sample(d, sample, json) : inspect_summary(d, argv[optind], json);
    larder_close(d);
    return status;
}
