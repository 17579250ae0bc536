-- const.lua — the numeric constants of engine/include/wisp.h as a Lua table (spec/lua/cdef_spec.lua keeps them in sync).
return {
    -- status codes
    WISP_OK        =   0,
    WISP_EINVAL    =  -1,
    WISP_ENOMEM    =  -2,
    WISP_EIO       =  -3,
    WISP_EFORMAT   =  -4,
    WISP_ECHECKSUM =  -5,
    WISP_EVERSION  =  -6,
    WISP_EPARSE    =  -7,
    WISP_ELIMIT    =  -8,
    WISP_ENODEV    =  -9,
    WISP_EDEVICE   = -10,
    WISP_ESTATE    = -11,

    -- version
    WISP_VERSION_MAJOR = 0,
    WISP_VERSION_MINOR = 1,
    WISP_VERSION_PATCH = 0,

    -- limits
    WISP_MAX_ROWS         = 2^26,
    WISP_MAX_NNZ          = 0xFFFFFFF0,
    WISP_MAX_ROW_FEATURES = 2^20,
    WISP_MAX_LINE_BYTES   = 64 * 2^20,
    WISP_MAX_FEATURES     = 0xFFFFFFFE,
    WISP_MAX_GPUS         = 16,
    WISP_MAX_IN_FLIGHT    = 3,
    WISP_MAX_PENDING      = 64,

    -- log levels
    WISP_LOG_DEBUG = 0,
    WISP_LOG_INFO  = 1,
    WISP_LOG_WARN  = 2,
    WISP_LOG_ERROR = 3,
    WISP_LOG_OFF   = 4,

    -- weight dtypes
    WISP_F32 = 0,
    WISP_F16 = 1,
    WISP_I8  = 2,

    -- wisp_model_load_ex flags
    WISP_LOAD_HUGEPAGES = 1,

    -- wisp_batch_from_csr: element types and flags
    WISP_CSR_INT32   = 1,
    WISP_CSR_INT64   = 2,
    WISP_CSR_UINT32  = 3,
    WISP_CSR_UINT64  = 4,
    WISP_CSR_FLOAT32 = 5,
    WISP_CSR_FLOAT64 = 6,
    WISP_CSR_STRICT  = 1,

    -- statistics (wisp_session_stat)
    WISP_STAT_BATCHES      = 0,
    WISP_STAT_ROWS         = 1,
    WISP_STAT_NNZ          = 2,
    WISP_STAT_OUT_OF_RANGE = 3,
    WISP_STAT_BAD_ROWS     = 4,
    WISP_STAT_FALLBACKS    = 5,
    WISP_STAT_NS_PARSE     = 6,
    WISP_STAT_NS_TRANSFORM = 7,
    WISP_STAT_NS_H2D       = 8,
    WISP_STAT_NS_KERNEL    = 9,
    WISP_STAT_NS_D2H       = 10,
    WISP_STAT_NS_SYNC      = 11,
    WISP_STAT_NS_OVERHEAD  = 12,
    WISP_STAT_NS_TOTAL     = 13,
    WISP_STAT_BYTES_H2D    = 14,
    WISP_STAT_BYTES_D2H    = 15,
    WISP_STAT_COUNT        = 16,

    -- raw input types and limits of feature columns
    WISP_INPUT_FLOAT32 = 0,
    WISP_INPUT_INT64   = 1,
    WISP_INPUT_STRING  = 2,

    -- device kinds (wisp_device_parse)
    WISP_DEVICE_CPU  = 0,
    WISP_DEVICE_GPU  = 1,
    WISP_DEVICE_GPUS = 2,
    WISP_DEVICE_AUTO = 3,

    -- where an "auto" session stands (wisp_session_auto_state)
    WISP_AUTO_FIXED = 0,
    WISP_AUTO_STARTING = 1,
    WISP_AUTO_CPU = 2,
    WISP_AUTO_ROUTING = 3,

    WISP_MAX_STRING_BYTES = 2^16,
    WISP_MAX_COLUMNS      = 65536,
    WISP_MAX_SPEC_BYTES   = 2^30,
}
