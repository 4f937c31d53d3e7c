/* wire_gate_figs.c - the wire accuracy gate's verdicts (see
 * wire_gate_figs.h). */
#include "common/wire/wire_gate_figs.h"

double st_wgate_top1_pct(const st_wgate_figs *f)
{
    return f->steps ? 100.0 * f->top1_agree / f->steps : 0;
}

double st_wgate_top5_mean(const st_wgate_figs *f) { return f->steps ? f->top5_sum / f->steps : 0; }

bool st_wgate_pass(st_wire_dtype d, const st_wgate_figs *f, double i8_top1_min, const char **rule)
{
    bool ok;
    const char *r;
    if (d == ST_WIRE_I8) {
        ok = st_wgate_top1_pct(f) >= i8_top1_min;
        r = ok ? "pass (top1 >= 90%)" : "FAIL (top1 < 90%)";
    } else if (d == ST_WIRE_F32) {
        ok = f->max_err == 0;
        r = ok ? "pass (exact)" : "FAIL (f32 not exact)";
    } else {
        ok = f->margin_fail == 0 && st_wgate_top5_mean(f) >= ST_WGATE_TOP5_MIN;
        r = ok ? "pass (margin argmax, top5 >= 4.8)" : "FAIL (margin argmax or top5 < 4.8)";
    }
    if (rule)
        *rule = r;
    return ok;
}
