/*
 * hdf5_types.c - which HDF5 datasets can be packed fields, and as what:
 * the larder dtype of a dataset's element type, the little-endian memory
 * type HDF5 converts it to on read, and the dataset's shape and size.
 */
#include "hdf5_input.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- types and shapes ------------------------------------------------- */

static int unsupported_type(const char *file, const char *path, const char *what)
{
    return larder__fail(LARDER_EUNSUPPORTED,
                        "%s: dataset %s: %s elements are not supported (only integer, float "
                        "and bool arrays)",
                        file, path, what);
}

/* The larder dtype of an integer type and the little-endian type that reads it. */
static int integer_type(hid_t type, int *dtype, hid_t *standard)
{
    bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    switch (H5Tget_size(type)) {
    case 1:
        *dtype = is_signed ? LARDER_DTYPE_I8 : LARDER_DTYPE_U8;
        *standard = is_signed ? H5T_STD_I8LE : H5T_STD_U8LE;
        return 0;
    case 2:
        *dtype = is_signed ? LARDER_DTYPE_I16 : LARDER_DTYPE_U16;
        *standard = is_signed ? H5T_STD_I16LE : H5T_STD_U16LE;
        return 0;
    case 4:
        *dtype = is_signed ? LARDER_DTYPE_I32 : LARDER_DTYPE_U32;
        *standard = is_signed ? H5T_STD_I32LE : H5T_STD_U32LE;
        return 0;
    case 8:
        *dtype = is_signed ? LARDER_DTYPE_I64 : LARDER_DTYPE_U64;
        *standard = is_signed ? H5T_STD_I64LE : H5T_STD_U64LE;
        return 0;
    default:
        return -1;
    }
}

/* Whether an enum type is h5py's bool: int8 base, FALSE = 0, TRUE = 1. */
static bool is_h5py_bool(hid_t type)
{
    if (H5Tget_size(type) != 1 || H5Tget_nmembers(type) != 2) return false;
    bool ok = true;
    for (unsigned i = 0; i < 2 && ok; i++) {
        char *name = H5Tget_member_name(type, i);
        unsigned char value = 0xff;
        ok = name && H5Tget_member_value(type, i, &value) >= 0 &&
             strcmp(name, i == 0 ? "FALSE" : "TRUE") == 0 && value == i;
        if (name) H5free_memory(name);
    }
    return ok;
}

/* Whether a 2-byte float type has IEEE binary16's layout (any byte order). */
static bool is_ieee_half(hid_t type)
{
    size_t sign_position, exponent_position, exponent_size, mantissa_position, mantissa_size;
    if (H5Tget_fields(type, &sign_position, &exponent_position, &exponent_size, &mantissa_position,
                      &mantissa_size) < 0)
        return false;
    return H5Tget_precision(type) == 16 && H5Tget_offset(type) == 0 && sign_position == 15 &&
           exponent_position == 10 && exponent_size == 5 && mantissa_position == 0 &&
           mantissa_size == 10 && H5Tget_ebias(type) == 15;
}

/*
 * The larder dtype of a dataset's file type, and in *memory_type (the
 * caller closes it) the type whose little-endian bytes a read yields.
 * Integers and floats of 1..8 bytes map to their dtype; h5py's bool enum
 * to BOOL; other enums to their integer base type (values kept, names
 * dropped).  Everything else -- strings (fixed or variable length),
 * compounds, arrays, references, opaque, bitfields, variable-length
 * sequences, long doubles -- fails with LARDER_EUNSUPPORTED: a field
 * must be an array numpy can describe with one of larder's dtypes, and
 * storing fixed-length strings as raw bytes while variable-length ones
 * (h5py's default for str) fail would be a trap.
 */
static int element_type(hid_t type, const char *file, const char *path, int *dtype,
                        hid_t *memory_type)
{
    *memory_type = H5I_INVALID_HID;
    hid_t standard = H5I_INVALID_HID;
    switch (H5Tget_class(type)) {
    case H5T_INTEGER:
        if (integer_type(type, dtype, &standard) < 0)
            return unsupported_type(file, path, "integer of unusual size");
        *memory_type = H5Tcopy(standard);
        break;
    case H5T_FLOAT:
        switch (H5Tget_size(type)) {
        case 2:
            if (!is_ieee_half(type)) return unsupported_type(file, path, "non-IEEE 2-byte float");
            *dtype = LARDER_DTYPE_F16;
            /* HDF5 1.10 has no predefined half type: the file's own
             * layout, made little-endian, is one. */
            *memory_type = H5Tcopy(type);
            if (*memory_type >= 0 && H5Tset_order(*memory_type, H5T_ORDER_LE) < 0) {
                H5Tclose(*memory_type);
                *memory_type = H5I_INVALID_HID;
            }
            break;
        case 4:
            *dtype = LARDER_DTYPE_F32;
            *memory_type = H5Tcopy(H5T_IEEE_F32LE);
            break;
        case 8:
            *dtype = LARDER_DTYPE_F64;
            *memory_type = H5Tcopy(H5T_IEEE_F64LE);
            break;
        default:
            return unsupported_type(file, path, "float of unusual size (long double?)");
        }
        break;
    case H5T_ENUM: {
        hid_t base = H5Tget_super(type);
        if (base < 0) return larder__hdf5_fail(file, path, "cannot read the enum's base type");
        int rc = H5Tget_class(base) == H5T_INTEGER ? integer_type(base, dtype, &standard) : -1;
        H5T_order_t order = H5Tget_order(base);
        H5Tclose(base);
        if (rc < 0) return unsupported_type(file, path, "enum with an unusual base type");
        if (is_h5py_bool(type)) *dtype = LARDER_DTYPE_BOOL;
        /* HDF5 converts enums only to enums, so read with the file's own
         * type; its bytes are little-endian when it is. */
        if (H5Tget_size(type) > 1 && order != H5T_ORDER_LE)
            return unsupported_type(file, path, "big-endian enum");
        *memory_type = H5Tcopy(type);
        break;
    }
    case H5T_STRING:
        return unsupported_type(file, path,
                                H5Tis_variable_str(type) > 0 ? "variable-length string"
                                                             : "fixed-length string");
    case H5T_COMPOUND:
        return unsupported_type(file, path, "compound");
    case H5T_VLEN:
        return unsupported_type(file, path, "variable-length");
    case H5T_REFERENCE:
        return unsupported_type(file, path, "reference");
    case H5T_OPAQUE:
        return unsupported_type(file, path, "opaque");
    case H5T_ARRAY:
        return unsupported_type(file, path, "array-typed");
    case H5T_BITFIELD:
        return unsupported_type(file, path, "bitfield");
    case H5T_TIME:
        return unsupported_type(file, path, "time");
    default:
        return larder__hdf5_fail(file, path, "cannot read the element type");
    }
    if (*memory_type < 0) return larder__hdf5_fail(file, path, "cannot make the memory type");
    return 0;
}

/* Fill a dataset's shape and byte size (out->dtype already set). */
static int describe_space(hid_t dataset, const char *file, const char *path,
                          struct larder__hdf5_shape *out)
{
    hid_t space = H5Dget_space(dataset);
    if (space < 0) return larder__hdf5_fail(file, path, "cannot read the dataspace");
    H5S_class_t class = H5Sget_simple_extent_type(space);
    hsize_t dims[H5S_MAX_RANK];
    int ndim = class == H5S_SIMPLE ? H5Sget_simple_extent_dims(space, dims, NULL) : 0;
    H5Sclose(space);
    if (class == H5S_NULL)
        return larder__fail(LARDER_EUNSUPPORTED, "%s: dataset %s: has no data (null dataspace)",
                            file, path);
    if ((class != H5S_SIMPLE && class != H5S_SCALAR) || ndim < 0)
        return larder__hdf5_fail(file, path, "cannot read the dataspace");
    if (ndim > LARDER_MAX_DIMS)
        return larder__fail(LARDER_EUNSUPPORTED, "%s: dataset %s: %d dimensions, at most %d", file,
                            path, ndim, LARDER_MAX_DIMS);
    uint64_t bytes = larder_dtype_size(out->dtype);
    out->ndim = (uint32_t)ndim;
    for (int d = 0; d < ndim; d++) {
        out->shape[d] = dims[d];
        if (!larder__mul_ok(bytes, dims[d], &bytes))
            return larder__fail(LARDER_EUNSUPPORTED, "%s: dataset %s: too large", file, path);
    }
    out->size = bytes;
    return 0;
}

/*
 * Read a dataset's dtype, shape and byte size, and when `memory_type` is
 * not NULL the type to read it with (the caller closes it on success).
 */
int larder__hdf5_describe_dataset(hid_t dataset, const char *file, const char *path,
                                  struct larder__hdf5_shape *out, hid_t *memory_type)
{
    memset(out, 0, sizeof *out);
    hid_t type = H5Dget_type(dataset);
    if (type < 0) return larder__hdf5_fail(file, path, "cannot read the element type");
    hid_t reader;
    int rc = element_type(type, file, path, &out->dtype, &reader);
    H5Tclose(type);
    if (rc < 0) return rc;
    rc = describe_space(dataset, file, path, out);
    if (rc < 0 || !memory_type)
        H5Tclose(reader);
    else
        *memory_type = reader;
    return rc;
}
