/*
 * index_builder.c - writing index files (layout in docs/format.md): the
 * builder collects shards, samples and fields in memory, refusing
 * duplicate keys as they come, and writes the whole file at once,
 * atomically.  index.c reads what this writes.
 */
#include "index_internal.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "hash.h"

/* Slots for n keys: a power of two with load at most 3/4. */
static uint64_t key_slots_for(uint64_t n)
{
    uint64_t slots = 16;
    while (slots - slots / 4 < n + 1)
        slots *= 2;
    return slots;
}

struct builder_sample {
    uint64_t offset, length, checksum, key, field_first;
    uint32_t shard, num_fields;
};

struct builder_shard {
    uint64_t name, size, checksum;
    uint32_t format;
    uint32_t sum_shift; /* 0: no block sums */
    uint64_t sum_first; /* its first entry in the builder's block sums */
};

struct larder__index_builder {
    uint32_t block_size;
    struct builder_shard *shards;
    size_t num_shards, cap_shards;
    struct builder_sample *samples;
    size_t num_samples, cap_samples;
    uint8_t *fields; /* encoded records */
    size_t num_fields, cap_fields;
    uint64_t *dims;
    size_t num_dims, cap_dims;
    char *strings;
    size_t strings_size, cap_strings;
    uint64_t total_bytes;
    /* key slots (same encoding as the file) for duplicate detection */
    uint64_t *slots;
    uint64_t num_slots;
    char *base;     /* NULL, or the base shard names are relative to (makes a version 2 index) */
    bool unchecked; /* no checksums: LARDER__INDEX_FLAG_UNCHECKED (makes a version 3 index) */
    /* per-block checksums of the shards that have them (make a version 3
     * index), in the order they were set; written in shard order */
    uint64_t *block_sums;
    size_t num_block_sums, cap_block_sums;
    /* interned non-key strings (field and shard names): offset+1, 0 empty */
    uint64_t *names;
    uint64_t num_name_slots, num_names;
};

int larder__index_builder_new(struct larder__index_builder **out, uint32_t block_size)
{
    struct larder__index_builder *b = calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    if (block_size == 0) block_size = LARDER__DEFAULT_BLOCK_SIZE;
    if (block_size & (block_size - 1)) {
        free(b);
        return larder__fail(LARDER_EUSAGE, "block size %u is not a power of two", block_size);
    }
    b->block_size = block_size;
    b->num_slots = 1024;
    b->slots = calloc(b->num_slots, 8);
    b->num_name_slots = 64;
    b->names = calloc(b->num_name_slots, 8);
    if (!b->slots || !b->names) {
        larder__index_builder_free(b);
        return -ENOMEM;
    }
    *out = b;
    return 0;
}

void larder__index_builder_free(struct larder__index_builder *b)
{
    if (!b) return;
    free(b->shards);
    free(b->samples);
    free(b->fields);
    free(b->dims);
    free(b->strings);
    free(b->slots);
    free(b->names);
    free(b->base);
    free(b->block_sums);
    free(b);
}

void larder__index_builder_set_unchecked(struct larder__index_builder *b)
{
    b->unchecked = true;
}

int larder__index_builder_set_base(struct larder__index_builder *b, const char *base)
{
    char *copy = base ? strdup(base) : NULL;
    if (base && (!copy || !base[0] || strlen(base) > UINT32_MAX)) {
        free(copy);
        return copy ? larder__fail(LARDER_EUSAGE, "bad index base '%s'", base) : -ENOMEM;
    }
    free(b->base);
    b->base = copy;
    return 0;
}

/* Append a string to the table; returns its offset or a negative code. */
static int64_t append_string(struct larder__index_builder *b, const char *s, size_t length)
{
    if (length > UINT32_MAX || memchr(s, '\0', length))
        return larder__fail(LARDER_EUSAGE, "string of %zu bytes cannot be stored", length);
    size_t need = b->strings_size + 4 + length + 1;
    if (larder__reserve((void **)&b->strings, &b->cap_strings, need, 1) < 0) return -ENOMEM;
    int64_t offset = (int64_t)b->strings_size;
    larder__put_le32(b->strings + offset, (uint32_t)length);
    memcpy(b->strings + offset + 4, s, length);
    b->strings[offset + 4 + length] = '\0';
    b->strings_size = need;
    return offset;
}

static const char *builder_string(const struct larder__index_builder *b, uint64_t offset,
                                  size_t *length)
{
    *length = larder__le32(b->strings + offset);
    return b->strings + offset + 4;
}

/* Append a name once, sharing the copy between all its uses. */
static int64_t intern_name(struct larder__index_builder *b, const char *s)
{
    size_t length = strlen(s);
    uint64_t hash = XXH3_64bits(s, length);
    uint64_t mask = b->num_name_slots - 1, slot = hash & mask;
    for (; b->names[slot]; slot = (slot + 1) & mask) {
        size_t have;
        const char *t = builder_string(b, b->names[slot] - 1, &have);
        if (have == length && memcmp(t, s, length) == 0) return (int64_t)b->names[slot] - 1;
    }
    int64_t offset = append_string(b, s, length);
    if (offset < 0) return offset;
    b->names[slot] = (uint64_t)offset + 1;
    if (++b->num_names * 2 > b->num_name_slots) {
        uint64_t n = b->num_name_slots * 2;
        uint64_t *grown = calloc(n, 8);
        if (!grown) return -ENOMEM;
        for (uint64_t i = 0; i < b->num_name_slots; i++) {
            if (!b->names[i]) continue;
            size_t len;
            const char *t = builder_string(b, b->names[i] - 1, &len);
            uint64_t j = XXH3_64bits(t, len) & (n - 1);
            while (grown[j])
                j = (j + 1) & (n - 1);
            grown[j] = b->names[i];
        }
        free(b->names);
        b->names = grown;
        b->num_name_slots = n;
    }
    return offset;
}

int64_t larder__index_builder_add_shard(struct larder__index_builder *b, const char *name,
                                        uint32_t format)
{
    if (!name[0] || (format != LARDER_FORMAT_TAR && format != LARDER_FORMAT_FLAT) ||
        b->num_shards >= UINT32_MAX)
        return larder__fail(LARDER_EUSAGE, "bad shard '%s' or format %u", name, format);
    if (larder__reserve((void **)&b->shards, &b->cap_shards, b->num_shards + 1, sizeof *b->shards) <
        0)
        return -ENOMEM;
    int64_t s = intern_name(b, name);
    if (s < 0) return s;
    b->shards[b->num_shards] = (struct builder_shard){.name = (uint64_t)s, .format = format};
    return (int64_t)b->num_shards++;
}

void larder__index_builder_set_shard(struct larder__index_builder *b, uint32_t shard, uint64_t size,
                                     uint64_t checksum)
{
    b->shards[shard].size = size;
    b->shards[shard].checksum = checksum;
}

int larder__index_builder_set_block_sums(struct larder__index_builder *b, uint32_t shard,
                                         uint32_t shift, const uint64_t *sums, uint64_t count)
{
    if (shard >= b->num_shards || b->shards[shard].sum_shift != 0 ||
        shift < LARDER__MIN_SUM_SHIFT || shift > LARDER__MAX_SUM_SHIFT ||
        (UINT64_C(1) << shift) < b->block_size)
        return larder__fail(LARDER_EUSAGE,
                            "shard %u: checksum blocks of 2^%u bytes (2^%d to 2^%d, and no smaller "
                            "than the block size %u)",
                            shard, shift, LARDER__MIN_SUM_SHIFT, LARDER__MAX_SUM_SHIFT,
                            b->block_size);
    uint64_t size = b->shards[shard].size;
    uint64_t want = size == 0 ? 0 : ((size - 1) >> shift) + 1;
    if (count != want)
        return larder__fail(LARDER_EUSAGE, "shard %u: %llu block checksums for %llu bytes", shard,
                            (unsigned long long)count, (unsigned long long)size);
    if (larder__reserve((void **)&b->block_sums, &b->cap_block_sums,
                        b->num_block_sums + (size_t)count, 8) < 0)
        return -ENOMEM;
    memcpy(b->block_sums + b->num_block_sums, sums, (size_t)count * 8);
    b->shards[shard].sum_shift = shift;
    b->shards[shard].sum_first = b->num_block_sums;
    b->num_block_sums += (size_t)count;
    return 0;
}

/* Whether some shard has block sums (the index is then version 3). */
static bool has_block_sums(const struct larder__index_builder *b)
{
    for (size_t i = 0; i < b->num_shards; i++)
        if (b->shards[i].sum_shift) return true;
    return false;
}

/* Insert `id` into a slot table (no duplicate check). */
static void slot_insert(uint64_t *slots, uint64_t num_slots, uint64_t hash, uint64_t id)
{
    uint64_t mask = num_slots - 1, slot = hash & mask;
    while (slots[slot])
        slot = (slot + 1) & mask;
    slots[slot] = larder__slot_tag(hash) << LARDER__SLOT_ID_BITS | (id + 1);
}

static uint64_t sample_key_hash(const struct larder__index_builder *b, uint64_t id)
{
    size_t length;
    const char *key = builder_string(b, b->samples[id].key, &length);
    return larder__key_hash(key, length);
}

static int rebuild_slots(struct larder__index_builder *b, uint64_t num_slots)
{
    uint64_t *slots = calloc(num_slots, 8);
    if (!slots) return -ENOMEM;
    for (uint64_t i = 0; i < b->num_samples; i++)
        slot_insert(slots, num_slots, sample_key_hash(b, i), i);
    free(b->slots);
    b->slots = slots;
    b->num_slots = num_slots;
    return 0;
}

int64_t larder__index_builder_add_sample(struct larder__index_builder *b, uint32_t shard,
                                         uint64_t offset, uint64_t length, uint64_t checksum,
                                         const char *key, size_t key_length,
                                         const struct larder__field *fields, uint32_t num_fields)
{
    if (shard >= b->num_shards || b->num_samples >= LARDER__INDEX_MAX_SAMPLES || key_length == 0)
        return larder__fail(LARDER_EUSAGE, "bad sample record for key '%.*s'", (int)key_length,
                            key);
    uint64_t end;
    if (!larder__add_ok(offset, length, &end))
        return larder__fail(LARDER_EUSAGE, "sample '%.*s': range overflows", (int)key_length, key);
    uint32_t ndims = 0;
    for (uint32_t f = 0; f < num_fields; f++) {
        if (!larder__add_ok(fields[f].offset, fields[f].length, &end) || end > length ||
            fields[f].ndim > LARDER_MAX_DIMS || fields[f].dtype < 0 ||
            fields[f].dtype >= LARDER_DTYPE_COUNT)
            return larder__fail(LARDER_EUSAGE, "sample '%.*s': field %u does not fit the sample",
                                (int)key_length, key, f);
        ndims += fields[f].dtype ? fields[f].ndim : 0;
    }

    /* duplicate key? */
    uint64_t hash = larder__key_hash(key, key_length);
    uint64_t mask = b->num_slots - 1;
    for (uint64_t slot = hash & mask; b->slots[slot]; slot = (slot + 1) & mask) {
        if (b->slots[slot] >> LARDER__SLOT_ID_BITS != larder__slot_tag(hash)) continue;
        uint64_t other = (b->slots[slot] & LARDER__SLOT_ID_MASK) - 1;
        size_t have;
        const char *k = builder_string(b, b->samples[other].key, &have);
        if (have == key_length && memcmp(k, key, key_length) == 0)
            return larder__fail(LARDER_EDUPKEY, "duplicate key '%.*s' (samples %llu and %llu)",
                                (int)key_length, key, (unsigned long long)other,
                                (unsigned long long)b->num_samples);
    }

    if (larder__reserve((void **)&b->samples, &b->cap_samples, b->num_samples + 1,
                        sizeof *b->samples) < 0 ||
        larder__reserve((void **)&b->fields, &b->cap_fields,
                        (b->num_fields + num_fields) * LARDER__INDEX_FIELD_SIZE, 1) < 0 ||
        larder__reserve((void **)&b->dims, &b->cap_dims, b->num_dims + ndims, 8) < 0)
        return -ENOMEM;
    int64_t key_offset = append_string(b, key, key_length);
    if (key_offset < 0) return key_offset;
    for (uint32_t f = 0; f < num_fields; f++) {
        int64_t name = intern_name(b, fields[f].name);
        if (name < 0) return name;
        uint8_t *r = b->fields + (b->num_fields + f) * LARDER__INDEX_FIELD_SIZE;
        memset(r, 0, LARDER__INDEX_FIELD_SIZE);
        larder__put_le64(r, (uint64_t)name);
        larder__put_le64(r + 8, fields[f].offset);
        larder__put_le64(r + 16, fields[f].length);
        larder__put_le64(r + 24, b->num_dims);
        r[32] = (uint8_t)fields[f].dtype;
        if (fields[f].dtype) {
            r[33] = (uint8_t)fields[f].ndim;
            for (uint32_t d = 0; d < fields[f].ndim; d++)
                b->dims[b->num_dims++] = fields[f].shape[d];
        }
    }
    uint64_t id = b->num_samples++;
    b->samples[id] = (struct builder_sample){.offset = offset,
                                             .length = length,
                                             .checksum = checksum,
                                             .key = (uint64_t)key_offset,
                                             .field_first = b->num_fields,
                                             .shard = shard,
                                             .num_fields = num_fields};
    b->num_fields += num_fields;
    b->total_bytes += length;
    if ((b->num_samples + 1) * 4 > b->num_slots * 3) {
        if (rebuild_slots(b, b->num_slots * 2) < 0) return -ENOMEM;
    } else {
        slot_insert(b->slots, b->num_slots, hash, id);
    }
    return (int64_t)id;
}

void larder__index_builder_set_checksum(struct larder__index_builder *b, uint64_t id,
                                        uint64_t checksum)
{
    b->samples[id].checksum = checksum;
}

uint64_t larder__index_builder_num_samples(const struct larder__index_builder *b)
{
    return b->num_samples;
}

const char *larder__index_builder_key(const struct larder__index_builder *b, uint64_t id)
{
    size_t length;
    return builder_string(b, b->samples[id].key, &length);
}

/* Buffered, hashing writer of the sections after the header. */
struct out {
    int fd;
    const char *path;
    uint64_t offset;
    uint8_t buf[1 << 16];
    size_t used;
    XXH3_state_t hash;
    int error;
};

static void out_flush(struct out *o)
{
    if (o->error || o->used == 0) return;
    o->error = larder__pwrite_full(o->fd, o->buf, o->used, o->offset, o->path);
    o->offset += o->used;
    o->used = 0;
}

static void out_put(struct out *o, const void *data, size_t length)
{
    const uint8_t *p = data;
    XXH3_128bits_update(&o->hash, p, length);
    while (length && !o->error) {
        size_t n = sizeof o->buf - o->used;
        if (n > length) n = length;
        memcpy(o->buf + o->used, p, n);
        o->used += n, p += n, length -= n;
        if (o->used == sizeof o->buf) out_flush(o);
    }
}

/* The size of the shard names' strings, which go first in the written table. */
static uint64_t shard_names_size(const struct larder__index_builder *b)
{
    uint64_t size = 0;
    for (size_t i = 0; i < b->num_shards; i++) {
        size_t length;
        builder_string(b, b->shards[i].name, &length);
        size += 4 + length + 1;
    }
    return size;
}

/* The header without its id and checksum, which need the rest of the file. */
static void encode_header(const struct larder__index_builder *b, uint8_t *header,
                          uint64_t num_slots, uint64_t prefix, uint64_t base_offset, uint64_t end)
{
    memset(header, 0, LARDER__INDEX_HEADER_SIZE);
    memcpy(header + H_MAGIC, LARDER__INDEX_MAGIC, 8);
    /* version 1 unless a base needs version 2 or block sums version 3:
     * older readers keep reading what they can read right, and refuse
     * what they would misread */
    bool sums = has_block_sums(b);
    larder__put_le32(header + H_VERSION, sums || b->unchecked ? 3 : b->base ? 2 : 1);
    uint32_t flags = (b->base ? LARDER__INDEX_FLAG_BASE : 0) |
                     (sums ? LARDER__INDEX_FLAG_BLOCK_SUMS : 0) |
                     (b->unchecked ? LARDER__INDEX_FLAG_UNCHECKED : 0);
    larder__put_le32(header + H_FLAGS, flags);
    if (b->base) larder__put_le64(header + H_BASE, base_offset);
    if (sums) larder__put_le64(header + H_NUM_BLOCK_SUMS, b->num_block_sums);
    larder__put_le32(header + H_HEADER_SIZE, LARDER__INDEX_HEADER_SIZE);
    larder__put_le64(header + H_NUM_SHARDS, b->num_shards);
    larder__put_le64(header + H_NUM_SAMPLES, b->num_samples);
    larder__put_le64(header + H_NUM_FIELDS, b->num_fields);
    larder__put_le64(header + H_NUM_DIMS, b->num_dims);
    larder__put_le64(header + H_NUM_KEY_SLOTS, num_slots);
    larder__put_le64(header + H_STRINGS_SIZE, prefix + b->strings_size);
    larder__put_le64(header + H_TOTAL_BYTES, b->total_bytes);
    larder__put_le64(header + H_FILE_SIZE, end);
    larder__put_le32(header + H_BLOCK_SIZE, b->block_size);
}

/* The sections after the header, with every string reference shifted by
 * `prefix` (the shard names and the base, moved to the front). */
static void put_sections(struct out *o, const struct larder__index_builder *b, uint64_t num_slots,
                         uint64_t prefix)
{
    for (size_t i = 0, name = 0; i < b->num_shards; i++) {
        uint8_t r[LARDER__INDEX_SHARD_SIZE] = {0};
        size_t length;
        builder_string(b, b->shards[i].name, &length);
        larder__put_le64(r, name);
        name += 4 + length + 1;
        larder__put_le64(r + 8, b->shards[i].size);
        larder__put_le64(r + 16, b->shards[i].checksum);
        larder__put_le32(r + 24, b->shards[i].format);
        larder__put_le32(r + 28, b->shards[i].sum_shift);
        out_put(o, r, sizeof r);
    }
    for (size_t i = 0; i < b->num_samples; i++) {
        const struct builder_sample *s = &b->samples[i];
        uint8_t r[LARDER__INDEX_SAMPLE_SIZE];
        larder__put_le64(r, s->offset);
        larder__put_le64(r + 8, s->length);
        larder__put_le64(r + 16, s->checksum);
        larder__put_le64(r + 24, prefix + s->key);
        larder__put_le64(r + 32, s->field_first);
        larder__put_le32(r + 40, s->shard);
        larder__put_le32(r + 44, s->num_fields);
        out_put(o, r, sizeof r);
    }
    for (size_t i = 0; i < b->num_fields; i++) {
        uint8_t r[LARDER__INDEX_FIELD_SIZE];
        memcpy(r, b->fields + i * LARDER__INDEX_FIELD_SIZE, sizeof r);
        larder__put_le64(r, prefix + larder__le64(r));
        out_put(o, r, sizeof r);
    }
    for (size_t i = 0; i < b->num_dims; i++) {
        uint8_t r[8];
        larder__put_le64(r, b->dims[i]);
        out_put(o, r, 8);
    }
    for (uint64_t i = 0; i < num_slots; i++) {
        uint8_t r[8];
        larder__put_le64(r, b->slots[i]);
        out_put(o, r, 8);
    }
    for (size_t i = 0; i < b->num_shards; i++) { /* block sums, in shard order */
        const struct builder_shard *shard = &b->shards[i];
        uint64_t count =
            shard->sum_shift
                ? ((shard->size + (UINT64_C(1) << shard->sum_shift) - 1) >> shard->sum_shift)
                : 0;
        for (uint64_t k = 0; k < count; k++) {
            uint8_t r[8];
            larder__put_le64(r, b->block_sums[shard->sum_first + k]);
            out_put(o, r, 8);
        }
    }
    for (size_t i = 0; i < b->num_shards; i++) {
        size_t length;
        builder_string(b, b->shards[i].name, &length);
        out_put(o, b->strings + b->shards[i].name, 4 + length + 1);
    }
    if (b->base) {
        uint8_t length[4];
        larder__put_le32(length, (uint32_t)strlen(b->base));
        out_put(o, length, 4);
        out_put(o, b->base, strlen(b->base) + 1);
    }
    out_put(o, b->strings, b->strings_size);
}

int larder__index_builder_write(struct larder__index_builder *b, const char *path,
                                char dataset_id[33])
{
    if (b->num_samples == 0) return larder__fail(LARDER_EEMPTY, "%s: no samples to index", path);
    uint64_t num_slots = key_slots_for(b->num_samples);
    if (num_slots != b->num_slots && rebuild_slots(b, num_slots) < 0) return -ENOMEM;

    /* The shard names go first in the string table, together, so that
     * opening the index (which checks every shard record) touches a page
     * or two of strings instead of one page per shard.  The builder's own
     * table follows unchanged; every other reference shifts by the prefix. */
    uint64_t prefix = shard_names_size(b);
    uint64_t base_offset = prefix; /* the base, if any, follows the shard names */
    if (b->base) prefix += 4 + strlen(b->base) + 1;
    struct larder__index_layout l;
    if (!larder__index_compute_layout(b->num_shards, b->num_samples, b->num_fields, b->num_dims,
                                      num_slots, b->num_block_sums, prefix + b->strings_size, &l))
        return larder__fail(LARDER_EUSAGE, "index too large");
    uint8_t header[LARDER__INDEX_HEADER_SIZE];
    encode_header(b, header, num_slots, prefix, base_offset, l.end);

    size_t tmp_length = strlen(path) + 16;
    char *tmp = malloc(tmp_length);
    struct out *o = malloc(sizeof *o);
    if (!tmp || !o) {
        free(tmp);
        free(o);
        return -ENOMEM;
    }
    snprintf(tmp, tmp_length, "%s.tmp%d", path, (int)getpid());
    int fd = larder__open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        free(tmp);
        free(o);
        return fd;
    }
    o->fd = fd, o->path = tmp, o->offset = 0, o->used = 0, o->error = 0;
    XXH3_128bits_reset(&o->hash);
    out_put(o, header, sizeof header);
    put_sections(o, b, num_slots, prefix);
    out_flush(o);
    int rc = o->error;
    XXH128_hash_t id = XXH3_128bits_digest(&o->hash);
    free(o);
    larder__put_le64(header + H_ID, id.low64);
    larder__put_le64(header + H_ID + 8, id.high64);
    larder__put_le64(header + H_CHECKSUM, XXH3_64bits(header, H_CHECKSUM));
    if (rc == 0) rc = larder__pwrite_full(fd, header, sizeof header, 0, tmp);
    if (rc == 0 && larder__sys.fsync(fd) < 0)
        rc = larder__fail(-errno, "%s: fsync: %s", tmp, strerror(errno));
    larder__sys.close(fd);
    if (rc == 0 && larder__sys.rename(tmp, path) < 0)
        rc = larder__fail(-errno, "%s: rename: %s", path, strerror(errno));
    if (rc < 0) unlink(tmp);
    free(tmp);
    if (rc == 0 && dataset_id) larder__hex128(id.high64, id.low64, dataset_id);
    return rc;
}
