/* What a bundle needs beyond the kernels: status messages and the weights' checksum. */
#include "rt_internal.h"

const char *lb_status_text(int status) {
    switch (status) {
    case LB_OK:
        return "ok";
    case LB_ERR_ARGUMENT:
        return "a NULL context, weights, arena, input or output pointer";
    case LB_ERR_BATCH:
        return "a batch size the model does not take";
    case LB_ERR_ALIGNMENT:
        return "weights or arena not aligned to 64 bytes";
    case LB_ERR_ISA:
        return "the context's instruction set is not the one the bundle was built for";
    case LB_ERR_WEIGHTS:
        return "weights of the wrong size or checksum: not this bundle's weights file";
    default:
        return "unknown status";
    }
}

uint32_t lb_crc32(const void *data, size_t n) {
    uint32_t table[256]; /* built per call: no global state, and 256 steps are nothing beside n */
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    const uint8_t *p = (const uint8_t *)data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}
