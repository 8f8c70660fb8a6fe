/*
 * layout.c - the samples the inputs list, and where each goes in the
 * shards (see layout.h for the three steps of packing).
 *
 * The placement depends only on the listed samples and the options
 * (seed, format, shard size): not on the number of writer threads, the
 * time of day or the file system order, so packing the same input twice
 * gives the same dataset id.
 */
#include "layout.h"
#include "npy.h"
#include "tar.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define ARENA_BLOCK (1u << 20)

/* ---- the listed samples ------------------------------------------------- */

struct arena_block {
    struct arena_block *next;
    size_t used, capacity;
    _Alignas(8) uint8_t data[];
};

struct listed_sample {
    const char *key;
    struct larder__pack_input *input;
    uint64_t first_field;
    uint32_t num_fields;
};

struct larder__pack_layout {
    struct arena_block *arena; /* keys, field names and shapes */
    struct listed_sample *samples;
    size_t num_samples, cap_samples;
    struct larder__pack_field *fields;
    size_t num_fields, cap_fields;
    struct larder__pack_input **inputs;
    size_t num_inputs, cap_inputs;
};

static void *arena_alloc(struct larder__pack_layout *layout, size_t size)
{
    size = (size + 7) & ~(size_t)7;
    struct arena_block *b = layout->arena;
    if (!b || b->capacity - b->used < size) {
        size_t capacity = size > ARENA_BLOCK ? size : ARENA_BLOCK;
        b = malloc(sizeof *b + capacity);
        if (!b) return NULL;
        b->next = layout->arena;
        b->used = 0;
        b->capacity = capacity;
        layout->arena = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    return p;
}

static char *arena_strndup(struct larder__pack_layout *layout, const char *s, size_t n)
{
    char *p = arena_alloc(layout, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

int larder__pack_layout_new(struct larder__pack_layout **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : -ENOMEM;
}

void larder__pack_layout_free(struct larder__pack_layout *layout)
{
    if (!layout) return;
    for (size_t i = 0; i < layout->num_inputs; i++)
        layout->inputs[i]->ops->close(layout->inputs[i]);
    while (layout->arena) {
        struct arena_block *next = layout->arena->next;
        free(layout->arena);
        layout->arena = next;
    }
    free(layout->samples);
    free(layout->fields);
    free(layout->inputs);
    free(layout);
}

uint64_t larder__pack_layout_num_samples(const struct larder__pack_layout *layout)
{
    return layout->num_samples;
}

void larder__pack_layout_sample(const struct larder__pack_layout *layout, uint64_t i,
                                const char **key, struct larder__pack_input **input,
                                const struct larder__pack_field **fields, uint32_t *num_fields)
{
    const struct listed_sample *s = &layout->samples[i];
    *key = s->key;
    *input = s->input;
    *fields = layout->fields + s->first_field;
    *num_fields = s->num_fields;
}

/* The sample's key and field names, before anything is copied. */
static int check_sample(const struct larder__pack_input *input, const char *key, size_t key_length,
                        const struct larder__pack_field *fields, uint32_t num_fields)
{
    if (key_length == 0 || key_length >= LARDER__TAR_MAX_NAME || memchr(key, '\0', key_length))
        return larder__fail(LARDER_EUSAGE, "%s: empty or overlong sample key", input->name);
    for (uint32_t f = 0; f < num_fields; f++) {
        if (!fields[f].name[0] || strchr(fields[f].name, '/') || fields[f].ndim > LARDER_MAX_DIMS)
            return larder__fail(LARDER_EUSAGE, "%s: sample '%.*s': bad field name '%s'",
                                input->name, (int)key_length, key, fields[f].name);
        for (uint32_t g = 0; g < f; g++)
            if (strcmp(fields[f].name, fields[g].name) == 0)
                return larder__fail(LARDER_EDUPKEY, "%s: sample '%.*s' has field '%s' twice",
                                    input->name, (int)key_length, key, fields[f].name);
    }
    return 0;
}

/* A copy of `field` in *copy, its name and shape in the arena. */
static int copy_field(struct larder__pack_layout *layout, const struct larder__pack_field *field,
                      struct larder__pack_field *copy)
{
    *copy = *field;
    if (!(copy->name = arena_strndup(layout, field->name, strlen(field->name)))) return -ENOMEM;
    copy->shape = NULL;
    if (field->ndim) {
        uint64_t *shape = arena_alloc(layout, field->ndim * sizeof *shape);
        if (!shape) return -ENOMEM;
        memcpy(shape, field->shape, field->ndim * sizeof *shape);
        copy->shape = shape;
    }
    return 0;
}

struct listing {
    struct larder__pack_layout *layout;
    struct larder__pack_input *input;
};

/* The larder__pack_sample_fn of larder__pack_layout_add_input. */
static int add_sample(void *context, const char *key, size_t key_length,
                      const struct larder__pack_field *fields, uint32_t num_fields)
{
    struct listing *listing = context;
    struct larder__pack_layout *layout = listing->layout;
    int rc = check_sample(listing->input, key, key_length, fields, num_fields);
    if (rc < 0) return rc;
    if (larder__reserve((void **)&layout->samples, &layout->cap_samples, layout->num_samples + 1,
                        sizeof *layout->samples) < 0 ||
        larder__reserve((void **)&layout->fields, &layout->cap_fields,
                        layout->num_fields + num_fields, sizeof *layout->fields) < 0)
        return -ENOMEM;
    struct listed_sample *s = &layout->samples[layout->num_samples];
    if (!(s->key = arena_strndup(layout, key, key_length))) return -ENOMEM;
    s->input = listing->input;
    s->first_field = layout->num_fields;
    s->num_fields = num_fields;
    for (uint32_t f = 0; f < num_fields; f++)
        if (copy_field(layout, &fields[f], &layout->fields[layout->num_fields + f]) < 0)
            return -ENOMEM;
    layout->num_fields += num_fields;
    layout->num_samples++;
    return 0;
}

int larder__pack_layout_add_input(struct larder__pack_layout *layout,
                                  struct larder__pack_input *input)
{
    size_t samples_before = layout->num_samples, fields_before = layout->num_fields;
    int rc = larder__reserve((void **)&layout->inputs, &layout->cap_inputs, layout->num_inputs + 1,
                             sizeof *layout->inputs);
    if (rc == 0) {
        struct listing listing = {.layout = layout, .input = input};
        rc = input->ops->list(input, add_sample, &listing);
        /* messages name the input; -ENOMEM from here comes bare */
        if (rc == -ENOMEM) rc = larder__fail(rc, "%s: out of memory", input->name);
    }
    if (rc < 0) {
        /* what a failed input listed is not packed, and points at it */
        layout->num_samples = samples_before;
        layout->num_fields = fields_before;
        input->ops->close(input);
        return rc;
    }
    layout->inputs[layout->num_inputs++] = input;
    return 0;
}

/* ---- placing ------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound) without modulo bias. */
static uint64_t random_below(uint64_t *state, uint64_t bound)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do
        x = splitmix64(state);
    while (x >= limit);
    return x % bound;
}

/* The listed samples' numbers in the order they are written (caller frees). */
static uint64_t *write_order(uint64_t n, const larder_pack_options *options)
{
    uint64_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return NULL;
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    if (options->shuffle) {
        uint64_t state = options->shuffle_seed;
        for (uint64_t i = n; i > 1; i--) {
            uint64_t j = random_below(&state, i);
            uint64_t t = order[i - 1];
            order[i - 1] = order[j], order[j] = t;
        }
    }
    return order;
}

void larder__pack_shard_name(char *out, size_t size, uint32_t shard, int format)
{
    snprintf(out, size, "shard-%06u.%s", shard, format == LARDER_FORMAT_FLAT ? "bin" : "tar");
}

/*
 * Look at the head of a field that might be an .npy array: sets the
 * dtype/shape the index will record.  Returns true when it is one.
 */
static bool sniff_npy(struct larder__pack_input *input, const struct larder__pack_field *field,
                      struct larder__npy *npy)
{
    if (field->dtype != LARDER_DTYPE_NONE || !larder__npy_bare_length(field->name) ||
        field->size < 10)
        return false;
    uint8_t head[4096];
    size_t length = field->size < sizeof head ? (size_t)field->size : sizeof head;
    if (input->ops->read(input, field, 0, head, length) < 0) return false;
    return larder__npy_parse(head, length, npy) == 0 &&
           npy->data_offset + npy->data_length == field->size;
}

/* The state of one placement. */
struct placing {
    struct larder__pack_layout *layout;
    struct larder__pack_placement *out;
    struct larder__index_builder *builder;
    uint64_t shard_size;
    uint64_t end_marker;                /* tar's two zero blocks */
    int64_t shard;                      /* being filled; -1 before the first */
    uint64_t position;                  /* in that shard */
    struct larder__field *index_fields; /* scratch: the sample's index record */
    size_t cap_index_fields;
};

/* Tar member name and header of a field: its header size, or a negative code. */
static int name_member(const struct larder__pack_input *input, const char *key,
                       const struct larder__pack_field *field, struct larder__pack_out_field *of,
                       uint64_t data_size)
{
    size_t member_length = strlen(key) + 1 + strlen(field->name) + 5;
    if (!(of->member = malloc(member_length))) return -ENOMEM;
    snprintf(of->member, member_length, "%s.%s%s", key, field->name, of->npy_size ? ".npy" : "");
    if (strlen(of->member) >= LARDER__TAR_MAX_NAME)
        return larder__fail(LARDER_EUSAGE, "%s: member name '%.80s...' is too long", input->name,
                            of->member);
    of->header_size = larder__tar_member_header_size(of->member, data_size);
    return 0;
}

/*
 * Size one field at *length bytes into its sample: fills its out field
 * and index field, and adds its bytes (tar header, npy header, data,
 * padding) to *length.
 */
static int place_field(struct placing *p, struct larder__pack_input *input, const char *key,
                       const struct larder__pack_field *field, struct larder__pack_out_field *of,
                       struct larder__field *ixf, uint64_t *length)
{
    int format = p->out->format;
    memset(ixf, 0, sizeof *ixf);
    of->field = field;
    ixf->name = field->name;
    ixf->dtype = field->dtype;
    ixf->ndim = field->dtype ? field->ndim : 0;
    for (uint32_t d = 0; d < ixf->ndim; d++)
        ixf->shape[d] = field->shape[d];
    uint64_t data_size = field->size, data_offset = 0;
    if (field->dtype != LARDER_DTYPE_NONE && format == LARDER_FORMAT_TAR) {
        uint8_t npy[LARDER__NPY_MAX_HEADER];
        of->npy_size = larder__npy_write_header(npy, field->dtype, field->ndim, field->shape);
        data_offset = of->npy_size;
        data_size += of->npy_size;
    }
    struct larder__npy sniffed;
    ixf->length = field->size;
    if (sniff_npy(input, field, &sniffed)) {
        ixf->name = arena_strndup(p->layout, field->name, larder__npy_bare_length(field->name));
        if (!ixf->name) return -ENOMEM;
        ixf->dtype = sniffed.dtype;
        ixf->ndim = sniffed.ndim;
        memcpy(ixf->shape, sniffed.shape, sizeof sniffed.shape);
        data_offset = sniffed.data_offset;
        ixf->length = sniffed.data_length;
    }
    if (format == LARDER_FORMAT_TAR) {
        int rc = name_member(input, key, field, of, data_size);
        if (rc < 0) return rc;
    }
    ixf->offset = *length + of->header_size + data_offset;
    *length += of->header_size + data_size;
    if (format == LARDER_FORMAT_TAR) *length += larder__tar_padding(data_size);
    return 0;
}

/* Close the shard being filled and start the next with sample k. */
static int next_shard(struct placing *p, uint64_t k)
{
    struct larder__pack_placement *out = p->out;
    if (p->shard >= 0) out->shard_bytes[p->shard] = p->position + p->end_marker;
    p->shard++;
    char name[64];
    larder__pack_shard_name(name, sizeof name, (uint32_t)p->shard, out->format);
    int64_t added = larder__index_builder_add_shard(p->builder, name, (uint32_t)out->format);
    if (added < 0) return (int)added;
    out->shard_first[p->shard] = k;
    p->position = 0;
    return 0;
}

/* "duplicate sample key": name both inputs the key comes from. */
static int duplicate_key(const struct placing *p, uint64_t k, const char *key,
                         const struct larder__pack_input *input)
{
    const char *other = "?";
    for (uint64_t j = 0; j < k; j++) {
        const struct listed_sample *s = &p->layout->samples[p->out->samples[j].listed];
        if (strcmp(s->key, key) == 0) other = s->input->name;
    }
    return larder__fail(LARDER_EDUPKEY, "duplicate sample key '%s' in %s and %s", key, other,
                        input->name);
}

/* Place the k-th sample to write, listed sample `listed`. */
static int place_sample(struct placing *p, uint64_t k, uint64_t listed)
{
    const struct listed_sample *ls = &p->layout->samples[listed];
    const struct larder__pack_field *fields = p->layout->fields + ls->first_field;
    uint32_t num_fields = ls->num_fields;
    struct larder__pack_out_sample *s = &p->out->samples[k];
    s->listed = listed;
    s->num_fields = num_fields;
    s->fields = calloc(num_fields ? num_fields : 1, sizeof *s->fields);
    if (!s->fields || larder__reserve((void **)&p->index_fields, &p->cap_index_fields,
                                      num_fields ? num_fields : 1, sizeof *p->index_fields) < 0)
        return -ENOMEM;
    /* sizes first, so the sample can go to the next shard when it would overflow */
    uint64_t length = 0;
    for (uint32_t f = 0; f < num_fields; f++) {
        int rc = place_field(p, ls->input, ls->key, &fields[f], &s->fields[f], &p->index_fields[f],
                             &length);
        if (rc < 0) return rc;
    }
    if (p->shard < 0 || (p->position > 0 && p->position + length > p->shard_size)) {
        int rc = next_shard(p, k);
        if (rc < 0) return rc;
    }
    s->shard = (uint32_t)p->shard;
    s->offset = p->position;
    s->length = length;
    int64_t id =
        larder__index_builder_add_sample(p->builder, (uint32_t)p->shard, p->position, length, 0,
                                         ls->key, strlen(ls->key), p->index_fields, num_fields);
    if (id == LARDER_EDUPKEY) return duplicate_key(p, k, ls->key, ls->input);
    if (id < 0) return (int)id;
    s->index_id = (uint64_t)id;
    p->position += length;
    p->out->bytes_total += length;
    return 0;
}

int larder__pack_layout_place(struct larder__pack_layout *layout,
                              const larder_pack_options *options, int format,
                              struct larder__index_builder *builder,
                              struct larder__pack_placement *out)
{
    uint64_t n = layout->num_samples;
    memset(out, 0, sizeof *out);
    out->format = format;
    uint64_t *order = write_order(n, options);
    out->samples = calloc(n ? n : 1, sizeof *out->samples);
    out->num_samples = n;
    out->shard_first = malloc((n + 1) * sizeof *out->shard_first);
    out->shard_bytes = calloc(n + 1, sizeof *out->shard_bytes);
    if (!order || !out->samples || !out->shard_first || !out->shard_bytes) {
        free(order);
        return -ENOMEM;
    }
    struct placing p = {
        .layout = layout,
        .out = out,
        .builder = builder,
        .shard_size = options->shard_size ? options->shard_size : (1ull << 30),
        .end_marker = format == LARDER_FORMAT_TAR ? 2 * LARDER__TAR_BLOCK : 0,
        .shard = -1,
    };
    int rc = 0;
    for (uint64_t k = 0; k < n && rc == 0; k++)
        rc = place_sample(&p, k, order[k]);
    free(p.index_fields);
    free(order);
    if (rc < 0) return rc;
    if (p.shard < 0) return larder__fail(LARDER_EEMPTY, "no samples to pack");
    out->num_shards = (uint32_t)(p.shard + 1);
    out->shard_bytes[p.shard] = p.position + p.end_marker;
    out->shard_first[p.shard + 1] = n;
    return 0;
}

void larder__pack_placement_free(struct larder__pack_placement *placement)
{
    if (!placement) return;
    for (uint64_t k = 0; placement->samples && k < placement->num_samples; k++) {
        struct larder__pack_out_sample *s = &placement->samples[k];
        for (uint32_t f = 0; s->fields && f < s->num_fields; f++)
            free(s->fields[f].member);
        free(s->fields);
    }
    free(placement->samples);
    free(placement->shard_first);
    free(placement->shard_bytes);
    memset(placement, 0, sizeof *placement);
}
