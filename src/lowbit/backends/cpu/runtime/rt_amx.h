/* The tile configuration of the AMX kernels (rt_qgemm_amx.c, rt_dmm_amx.c). */
#ifndef LOWBIT_RT_AMX_H
#define LOWBIT_RT_AMX_H

#include "rt_internal.h"

#if LB_HAVE_AMX
#include <immintrin.h>

/* The 64-byte operand of ldtilecfg, palette 1. */
typedef struct lb_tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} lb_tilecfg;

/* Tiles 0 .. n-1 as 16 rows x 64 bytes, for the calling thread (the tile state is per thread:
 * each task configures it, and ends with _tile_release()). */
LB_TARGET_AMX static inline void lb_amx_configure(int n) {
    lb_tilecfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int i = 0; i < n; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
}
#endif

#endif
