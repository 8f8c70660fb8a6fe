/*
 * test_npy.c - .npy header parsing and writing.
 */
#include "npy.h"
#include "test.h"

TEST(npy_roundtrip)
{
    uint8_t header[LARDER__NPY_MAX_HEADER];
    uint64_t shape[3] = {2, 3, 4};
    size_t n = larder__npy_write_header(header, LARDER_DTYPE_F32, 3, shape);
    CHECK_EQ(n % 64, 0);
    struct larder__npy npy;
    CHECK_EQ(larder__npy_parse(header, n, &npy), 0);
    CHECK_EQ(npy.dtype, LARDER_DTYPE_F32);
    CHECK_EQ(npy.ndim, 3);
    CHECK_EQ(npy.shape[2], 4);
    CHECK_EQ(npy.data_offset, n);
    CHECK_EQ(npy.data_length, 2 * 3 * 4 * 4);
    /* one dimension and scalars */
    n = larder__npy_write_header(header, LARDER_DTYPE_U8, 1, shape);
    CHECK_EQ(larder__npy_parse(header, n, &npy), 0);
    CHECK_EQ(npy.ndim, 1);
    CHECK_EQ(npy.data_length, 2);
    n = larder__npy_write_header(header, LARDER_DTYPE_I64, 0, shape);
    CHECK_EQ(larder__npy_parse(header, n, &npy), 0);
    CHECK_EQ(npy.ndim, 0);
    CHECK_EQ(npy.data_length, 8);
}

/* numpy itself writes the file; larder must agree on dtype, shape and offset. */
TEST(npy_matches_numpy)
{
    int rc = test_sh("/usr/bin/python3 -c \"import numpy as np; "
                     "np.save('a.npy', np.zeros((5, 7), dtype='<f8')); "
                     "np.save('b.npy', np.zeros((3,), dtype='>i4')); "
                     "np.save('c.npy', np.asfortranarray(np.zeros((3, 2), dtype='<f4'))); "
                     "np.save('d.npy', np.array([True, False]))\" 2>/dev/null");
    if (rc != 0) SKIP("numpy for /usr/bin/python3 is not installed");
    size_t size;
    struct larder__npy npy;
    uint8_t *a = test_read_file("a.npy", &size);
    CHECK_EQ(larder__npy_parse(a, size, &npy), 0);
    CHECK_EQ(npy.dtype, LARDER_DTYPE_F64);
    CHECK_EQ(npy.shape[0], 5);
    CHECK_EQ(npy.shape[1], 7);
    CHECK_EQ(npy.data_offset + npy.data_length, size);
    free(a);
    uint8_t *b = test_read_file("b.npy", &size);
    CHECK_EQ(larder__npy_parse(b, size, &npy), LARDER_EUNSUPPORTED); /* big-endian */
    free(b);
    uint8_t *c = test_read_file("c.npy", &size);
    CHECK_EQ(larder__npy_parse(c, size, &npy), LARDER_EUNSUPPORTED); /* Fortran order */
    free(c);
    uint8_t *d = test_read_file("d.npy", &size);
    CHECK_EQ(larder__npy_parse(d, size, &npy), 0);
    CHECK_EQ(npy.dtype, LARDER_DTYPE_BOOL);
    free(d);
}

TEST(npy_garbage)
{
    struct larder__npy npy;
    CHECK_EQ(larder__npy_parse("hello", 5, &npy), LARDER_EUNSUPPORTED);
    const char truncated[] = "\x93NUMPY\x01\x00\x50\x00{'descr': '<f4'";
    CHECK_EQ(larder__npy_parse(truncated, sizeof truncated - 1, &npy), LARDER_EUNSUPPORTED);
    char header[128] = "\x93NUMPY\x01\x00";
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, "
                       "99999999999, 99999999999), }";
    size_t n = strlen(dict);
    header[8] = (char)n;
    header[9] = 0;
    memcpy(header + 10, dict, n);
    CHECK_EQ(larder__npy_parse(header, 10 + n, &npy), LARDER_EUNSUPPORTED); /* overflow */
    CHECK_EQ(larder__npy_bare_length("image.npy"), 5);
    CHECK_EQ(larder__npy_bare_length("npy"), 3);
    CHECK_EQ(larder__npy_bare_length("jpg"), 0);
    CHECK_EQ(larder__npy_bare_length(".npy"), 0);
}
