-- csr_lines.lua — a batch's rows as libsvm lines ("0 id:value id ..."), for the specs' model makers (models.lua,
-- property.lua): dofile("spec/nginx/csr_lines.lua")(batch[, binary]) -> a list of lines, one a row; binary: the
-- format of a binary feature (default "%d", the bare id).
local fmt = string.format
return function(batch, binary)
    binary = binary or "%d"
    local csr = batch:csr()
    local lines = {}
    for r = 1, #csr.indptr - 1 do
        local parts = { "0" }
        local a, z = csr.indptr[r], csr.indptr[r + 1]
        local va, vz = 0, 0
        if csr.val_ptr then va, vz = csr.val_ptr[r], csr.val_ptr[r + 1] end
        for k = a, z - 1 do
            local vi = va + (k - a)
            if vi < vz then parts[#parts + 1] = fmt("%d:%.9g", csr.ids[k + 1], csr.vals[vi + 1])
            else parts[#parts + 1] = fmt(binary, csr.ids[k + 1]) end
        end
        lines[r] = table.concat(parts, " ")
    end
    return lines
end
