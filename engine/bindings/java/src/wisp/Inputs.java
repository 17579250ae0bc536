// Inputs.java — the raw inputs of a model's column description (name, input type, dense or sparse), looked up by name.
package wisp;

import java.util.HashMap;
import java.util.Map;

final class Inputs {
    static final int FLOAT32 = 0, INT64 = 1, STRING = 2;   // WISP_INPUT_*

    final String[] names;
    final int[] types;
    final boolean[] sparse;
    private final Map<String, Integer> index = new HashMap<>();

    Inputs(String[] lines) {
        int n = lines.length;
        names = new String[n];
        types = new int[n];
        sparse = new boolean[n];
        for (int i = 0; i < n; i++) {
            String[] f = lines[i].split("\t", -1);
            names[i] = f[0];
            types[i] = Integer.parseInt(f[1]);
            sparse[i] = f[2].equals("1");
            index.put(f[0], i);
        }
    }

    /** The index of the input called name, or -1. */
    int indexOf(String name) {
        Integer i = index.get(name);
        return i == null ? -1 : i;
    }

    static String typeName(int t) {
        return t == FLOAT32 ? "float32" : t == INT64 ? "int64" : "string";
    }
}
