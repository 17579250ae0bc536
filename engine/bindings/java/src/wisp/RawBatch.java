// RawBatch.java — a raw batch (List<Map> rows or column arrays of raw inputs) flattened into the arrays one JNI call fills a wisp_raw from.
//
// The encoding (read by raw_fill in wisp_jni.c): value k of the call goes to
// input[k] with kind[k] (0 a float in dv[k], 1 an integer in lv[k], 2 the
// string bytes str[strOff[k] .. strOff[k+1])); row i holds the values
// [rowStart[i], rowStart[i+1]). A row the binding cannot encode (an unknown
// input name, a value of no input type) carries its message in rejects[i]
// and becomes a bad row, as the engine's own readers make one.
package wisp;

import java.lang.reflect.Array;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Map;

final class RawBatch {
    static final byte V_FLOAT = 0, V_INT = 1, V_STRING = 2;

    int rows;
    int[] rowStart = new int[17];
    int n;                        // values
    int[] input = new int[64];
    byte[] kind = new byte[64];
    double[] dv = new double[64];
    long[] lv = new long[64];
    int[] strOff = new int[65];
    byte[] str = new byte[256];
    int strLen;
    String[] rejects;             // null when no row is rejected

    private final Inputs inputs;

    RawBatch(Inputs inputs) {
        this.inputs = inputs;
    }

    static RawBatch fromMaps(Inputs inputs, List<? extends Map<String, ?>> list) {
        RawBatch r = new RawBatch(inputs);
        for (Map<String, ?> row : list) {
            r.beginRow();
            if (row == null) {
                r.reject("the row is null");
                continue;
            }
            for (Map.Entry<String, ?> e : row.entrySet()) {
                if (!r.addNamed(e.getKey(), e.getValue())) break;
            }
        }
        r.endRows();
        return r;
    }

    /** Columns: each value a float[], double[], int[], long[], String[], Object[] or List of one entry per row. */
    static RawBatch fromColumns(Inputs inputs, Map<String, ?> columns) {
        int rows = -1;
        String first = null;
        for (Map.Entry<String, ?> e : columns.entrySet()) {
            int len = length(e.getKey(), e.getValue());
            if (rows < 0) {
                rows = len;
                first = e.getKey();
            } else if (len != rows) {
                throw new WispException(WispException.EINVAL, "raw columns: '" + e.getKey() + "' has " + len
                        + " rows but '" + first + "' has " + rows);
            }
        }
        RawBatch r = new RawBatch(inputs);
        Map.Entry<?, ?>[] cols = columns.entrySet().toArray(new Map.Entry<?, ?>[0]);
        for (int i = 0; i < Math.max(rows, 0); i++) {
            r.beginRow();
            for (Map.Entry<?, ?> e : cols) {
                Object col = e.getValue();
                Object v = col instanceof List ? ((List<?>) col).get(i) : Array.get(col, i);
                if (!r.addNamed((String) e.getKey(), v)) break;
            }
        }
        r.endRows();
        return r;
    }

    private static int length(String name, Object col) {
        if (col instanceof List) return ((List<?>) col).size();
        if (col != null && col.getClass().isArray()) return Array.getLength(col);
        throw new WispException(WispException.EINVAL, "raw columns: '" + name
                + "' must be an array or a List with one entry per row (got " + (col == null ? "null" : col.getClass().getName()) + ")");
    }

    private void beginRow() {
        if (rows + 2 > rowStart.length) rowStart = Arrays.copyOf(rowStart, rowStart.length * 2);
        rowStart[rows] = n;
        rows++;
    }

    private void endRows() {
        if (rows + 1 > rowStart.length) rowStart = Arrays.copyOf(rowStart, rows + 1);
        rowStart[rows] = n;
    }

    /** Reject the open row: its values are dropped and its message kept. */
    private void reject(String msg) {
        if (rejects == null) rejects = new String[Math.max(16, rowStart.length)];
        if (rejects.length < rows) rejects = Arrays.copyOf(rejects, Math.max(rows, rejects.length * 2));
        rejects[rows - 1] = msg;
        n = rowStart[rows - 1];
    }

    /** Add the value(s) of input `name` to the open row; false when the row was rejected. */
    private boolean addNamed(String name, Object v) {
        int in = name == null ? -1 : inputs.indexOf(name);
        if (in < 0) {
            reject("unknown input '" + name + "' (not an input of the model's column description)");
            return false;
        }
        if (v == null) return true;                      // missing: the input's default, or no value
        if (v instanceof Collection) {
            for (Object e : (Collection<?>) v)
                if (e != null && !addOne(in, name, e)) return false;
            return true;
        }
        if (v.getClass().isArray() && !(v instanceof byte[])) {
            int len = Array.getLength(v);
            for (int k = 0; k < len; k++) {
                Object e = Array.get(v, k);
                if (e != null && !addOne(in, name, e)) return false;
            }
            return true;
        }
        return addOne(in, name, v);
    }

    private boolean addOne(int in, String name, Object v) {
        grow();
        if (v instanceof Double || v instanceof Float) {
            kind[n] = V_FLOAT;
            dv[n] = ((Number) v).doubleValue();
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
            kind[n] = V_INT;
            lv[n] = ((Number) v).longValue();
        } else if (v instanceof CharSequence || v instanceof byte[]) {
            byte[] b = v instanceof byte[] ? (byte[]) v : v.toString().getBytes(StandardCharsets.UTF_8);
            kind[n] = V_STRING;
            if (strLen + b.length > str.length) str = Arrays.copyOf(str, Math.max(str.length * 2, strLen + b.length));
            System.arraycopy(b, 0, str, strLen, b.length);
            strOff[n] = strLen;
            strLen += b.length;
        } else {
            reject("input '" + name + "': a " + v.getClass().getSimpleName() + " is not a float, an integer or a string");
            return false;
        }
        input[n] = in;
        n++;
        strOff[n] = strLen;
        return true;
    }

    private void grow() {
        if (n + 1 < input.length) return;
        int cap = input.length * 2;
        input = Arrays.copyOf(input, cap);
        kind = Arrays.copyOf(kind, cap);
        dv = Arrays.copyOf(dv, cap);
        lv = Arrays.copyOf(lv, cap);
        strOff = Arrays.copyOf(strOff, cap + 1);
    }

    /** The rejects array sized for the JNI call (null when no row was rejected). */
    String[] rejects() {
        if (rejects == null) return null;
        return rejects.length == rows ? rejects : Arrays.copyOf(rejects, rows);
    }
}
