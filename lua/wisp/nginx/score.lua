-- wisp/nginx/score.lua — the one scoring route of a parsed predict request, taken by the worker
-- (inline, auto) and by the thread pool's VM alike: a raw batch through session:score_raw (fused
-- transform + score on a GPU), a batch through session:score, and the rows the session refused
-- with their messages (session:bad_rows after score_raw: no transform run again to explain them).

local R = require "wisp.nginx.request"
local I = require "wisp.nginx.instances"
local MD = require "wisp.nginx.models"

local errs_of, instance_errors, float_buf = R.errs_of, I.instance_errors, MD.float_buf

local M = {}

-- score(e, b, kind, n, errs, bad, raw) -> out (e.out, n floats), errs, bad, added; or nil, err.
-- errs/bad: the parser's bad rows (parse_into's); raw: the rows are in e.tr, untransformed.
-- added: how many rows the scoring found bad beyond errs (for wisp_row_errors_total).
-- An {"instances"} body (kind "json") has its messages said in its terms: the scanner's
-- buffers still hold this body's, as nothing yields between parse and score.
function M.score(e, b, kind, n, errs, bad, raw)
    if n > e.outcap then e.outcap = n * 2; e.out = float_buf(e.outcap) end
    local s = e.session
    local out, err
    if raw then out, err = s:score_raw(e.tr, e.out) else out, err = s:score(b, e.out) end
    if not out then return nil, err end
    if not raw then return out, errs, bad, 0 end
    local nb0 = errs and #errs or 0
    if s:bad_count() > nb0 then
        -- the transform refused rows the parser took: the session lists every bad row (the
        -- parser's too), with the transform's messages
        local terrs, tbad = errs_of(s:bad_rows(), true)
        if kind == "json" then terrs = instance_errors(terrs, I.firsts(), I.starts()) end
        if terrs then errs, bad = terrs, tbad end
    end
    for i = 0, n - 1 do                    -- a NaN nobody explained (not expected)
        local p = out[i]
        if p ~= p and not (bad and bad[i]) then
            errs, bad = errs or {}, bad or {}
            errs[#errs + 1] = { index = i, error = "the row scored NaN" }
            bad[i] = true
        end
    end
    return out, errs, bad, (errs and #errs or 0) - nb0
end

return M
