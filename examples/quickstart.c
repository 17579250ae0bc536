/* quickstart.c — the C API in one page: write a model, load it, score two rows.
 *
 *   cc quickstart.c $(pkg-config --cflags --libs wisp) -o quickstart && ./quickstart
 */
#include <stdio.h>
#include <wisp.h>

int main(void)
{
    float weights[8] = {0.0f, 0.5f, -0.25f, 1.0f, 0.0f, 0.0f, 0.0f, 2.0f};
    if (wisp_model_write("quickstart.wisp", weights, 8, -0.5, WISP_F32, "source=quickstart\n", NULL) != WISP_OK) {
        fprintf(stderr, "quickstart: %s\n", wisp_errmsg());
        return 1;
    }
    wisp_engine *eng = NULL; wisp_model *m = NULL; wisp_batch *b = NULL; wisp_session *s = NULL;
    int rc = 1;
    if (wisp_engine_new(0, &eng) != WISP_OK || wisp_model_load(eng, "quickstart.wisp", &m) != WISP_OK ||
        wisp_batch_new(eng, &b) != WISP_OK || wisp_session_new(eng, m, "auto", &s) != WISP_OK) {
        fprintf(stderr, "quickstart: %s\n", wisp_errmsg());
        goto out;
    }
    uint64_t ids[] = {1, 3, 7};
    float vals[] = {2.0f, 1.0f, 0.5f};
    wisp_batch_add_row(b, ids, vals, 3);   /* valued: -0.5 + 0.5*2 + 1*1 + 2*0.5 = 2.5 */
    wisp_batch_add_row(b, ids, NULL, 2);   /* binary: -0.5 + 0.5 + 1 = 1.0 */
    float p[2];
    if (wisp_session_score(s, b, p) != WISP_OK) { fprintf(stderr, "quickstart: %s\n", wisp_errmsg()); goto out; }
    printf("p = %.6f %.6f on %s\n", p[0], p[1], wisp_session_last_device(s));
    rc = 0;
out:
    wisp_session_free(s); wisp_batch_free(b); wisp_model_free(m); wisp_engine_free(eng);
    remove("quickstart.wisp");
    return rc;
}
