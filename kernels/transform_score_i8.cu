// transform_score_i8.cu — the fused transform + score kernel (kernels/transform_rows.cuh) for i8 weights: one dtype per
// translation unit, so the instantiations build in parallel.
#include "transform_rows.cuh"

cudaError_t wisp__k_xf_score_i8(WISP_XF_SCORE_ARGS)
{
    return xf_score_launch<int8_t>(plan, raw, weights, num_features, bias, sc, out, cnt, stream);
}
