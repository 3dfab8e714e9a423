# Declarations of the hookcore C core (hookcore/core/hookcore.h) for the Cython wrapper.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t


cdef extern from "hookcore.h" nogil:
    enum:
        HK_MAX_DEVICES
        HK_MAX_SLOTS
        HK_UUID_MAX
        HK_PATH_MAX
        HK_ERR_MAX
        HK_LIMITER_BYTES
        HK_SM_UNLIMITED
        HK_LEDGER_VERSION
        HK_OK
        HK_ENOMEM
        HK_EFAILCLOSED
        HK_EINVAL
        HK_ENODEV
        HK_EIO
        HK_ENOSPC
        HK_OPEN_READONLY
        HK_OPEN_NOCLAIM
        HK_SLOT_FREE
        HK_SLOT_CLAIMING
        HK_SLOT_LIVE
        HK_SLOT_DEAD
        HK_CFG_MEM_SET
        HK_CFG_SM_SET
        HK_CFG_UUID_SET
        HK_CFG_ELASTICITY_SET
        HK_COMPUTE_SHARE
        HK_COMPUTE_STRICT
        HK_ORIGIN_NONE
        HK_ORIGIN_ENV
        HK_ORIGIN_FILE
        HK_ENOENT
    uint64_t HK_MEM_UNLIMITED
    uint64_t HK_MEM_MAX
    const char *HK_DEFAULT_LEDGER
    const char *HK_CONFIG_ROOT

    ctypedef struct hk_config:
        uint32_t origin
        uint32_t device_count
        uint32_t uuid_keyed
        uint64_t mem_limit[16]
        uint32_t sm_limit[16]
        uint32_t flags[16]
        uint32_t compute_mode[16]
        uint32_t ref_mhz[16]
        uint32_t elasticity_milli[16]
        char uuid[16][64]
        uint64_t ctx_bytes[16]
        uint32_t device_sms[16]
        char ledger_path[4096]
        uint32_t priority[16]
        char board_dir[4096]

    ctypedef struct hk_ledger:
        pass

    ctypedef struct hk_device_info:
        char uuid[64]
        uint64_t mem_limit
        uint32_t sm_limit
        uint32_t live_processes
        uint64_t used
        uint64_t peak

    ctypedef struct hk_process_info:
        uint32_t state
        int32_t pid
        uint64_t start_time
        uint64_t nonce
        uint64_t used[16]

    ctypedef struct hk_env_alias:
        const char *name
        const char *key

    ctypedef struct hk_config_source:
        const char *const *envp
        const hk_env_alias *aliases
        const char *file_text
        const char *file_path
        const char *stem

    const char *hk_strerror(int code)
    int hk_config_parse_source(const hk_config_source *src, hk_config *out, char *err, size_t errlen)
    int hk_config_file_path(const char *stem, char *out, size_t n)
    int hk_parse_mem(const char *name, const char *value, uint64_t *bytes, char *err, size_t errlen)
    int hk_parse_sm(const char *name, const char *value, uint32_t *percent, char *err, size_t errlen)
    int hk_uuid_equal(const char *a, const char *b)
    const hk_env_alias *hk_env_aliases_for(const char *stem)

    int hk_ledger_open(const char *path, const hk_config *cfg, unsigned flags, hk_ledger **out,
                       char *err, size_t errlen)
    void hk_ledger_close(hk_ledger *l)
    int hk_ledger_open_snapshot(const char *path, hk_ledger **out, char *err, size_t errlen) nogil
    uint32_t hk_ledger_device_count(const hk_ledger *l)
    uint32_t hk_ledger_slot_hwm(const hk_ledger *l)
    uint32_t hk_ledger_version(const hk_ledger *l)
    int hk_ledger_device(const hk_ledger *l, int dev, hk_device_info *out)
    int hk_ledger_process(const hk_ledger *l, int slot, hk_process_info *out)
    uint64_t hk_proc_start_time(int pid)
    void *hk_ledger_limiter_area(hk_ledger *l, int dev)


cdef extern from "limiter.h" nogil:
    const long long HK_LIMITER_BURST_NS
    const long long HK_LIMITER_WAKE_NS
    const unsigned int HK_SM_PPM_FULL
    ctypedef struct hk_limiter_stats:
        uint32_t active
        uint32_t share
        int64_t tokens_ns
        int64_t charged_ns
        int64_t throttled_ns
        int64_t granted_ns
        int64_t device_ns
        uint32_t sm_ppm
        uint32_t factor_milli
        uint32_t elastic_milli
        uint32_t elastic_fit
        int64_t yielded_ns
        int64_t elapsed_ns
        int64_t throttles

    void hk_limiter_read(const void *area, hk_limiter_stats *out)
