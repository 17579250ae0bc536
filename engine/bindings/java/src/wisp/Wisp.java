// Wisp.java — the process-wide parts of the binding: the version, the engine's threads and devices, the shared Cleaner.
package wisp;

import java.lang.ref.Cleaner;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The engine is created once per process, on first use, with
 * {@code -Dwisp.threads=N} CPU threads (default 0: one per core), and lives
 * as long as the process.
 */
public final class Wisp {
    private Wisp() {}

    /** The safety net of every handle: frees what a caller forgot to close. */
    static final Cleaner CLEANER = Cleaner.create();

    private static volatile boolean started;

    /** Create the engine now (every other call does it on first use). */
    static void engine() {
        if (started) return;
        synchronized (Wisp.class) {
            if (started) return;
            int threads = Integer.getInteger("wisp.threads", 0);
            Native.engine(threads);
            started = true;
        }
    }

    /** "0.1.0". */
    public static String version() {
        return Native.version();
    }

    /** The CPU threads the engine scores with. */
    public static int threads() {
        engine();
        return Native.engineThreads();
    }

    /** A usable-or-not CUDA device, as wisp_engine_gpu_* reports it. */
    public static final class Gpu {
        public final String name;
        public final long memory;
        public final int capability;
        public final boolean usable;

        Gpu(String name, long memory, int capability, boolean usable) {
            this.name = name;
            this.memory = memory;
            this.capability = capability;
            this.usable = usable;
        }

        @Override
        public String toString() {
            return name + " (" + (memory >> 20) + " MiB, sm_" + capability + (usable ? "" : ", failed") + ")";
        }
    }

    /** The CUDA devices found (empty without a GPU, a driver or a CUDA build; see {@link #gpuStatus}). */
    public static List<Gpu> gpus() {
        engine();
        String[] d = Native.devices();
        List<Gpu> out = new ArrayList<>();
        for (int i = 1; i < d.length; i++) {
            String[] f = d[i].split("\t", -1);
            out.add(new Gpu(f[0], Long.parseUnsignedLong(f[1]), Integer.parseInt(f[2]), f[3].equals("1")));
        }
        return Collections.unmodifiableList(out);
    }

    /** "2 CUDA devices", or why there is none ("no CUDA device: ..."). */
    public static String gpuStatus() {
        engine();
        return Native.devices()[0];
    }
}
