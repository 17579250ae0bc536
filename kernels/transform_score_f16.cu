// transform_score_f16.cu — the fused transform + score kernel (kernels/transform_rows.cuh) for f16 weights: one dtype
// per translation unit, so the instantiations build in parallel.
#include "transform_rows.cuh"

cudaError_t wisp__k_xf_score_f16(WISP_XF_SCORE_ARGS)
{
    return xf_score_launch<__half>(plan, raw, weights, num_features, bias, sc, out, cnt, stream);
}
