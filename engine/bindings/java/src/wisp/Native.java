// Native.java — the JNI entry points (engine/bindings/java/wisp_jni.c) and the loader that takes libwispjni.so out of the jar.
//
// The jar carries the native library at /wisp/native/<os>-<arch>/libwispjni.so
// (the way ONNX Runtime's and XGBoost4J's jars carry theirs). On first use it
// is copied to a private temporary directory and loaded from there; the
// system property wisp.native.lib (a path to libwispjni.so) loads that file
// instead, for development builds. Every method here takes raw handles; the
// public classes own them and check "closed" and "in use" before calling.
package wisp;

import java.io.IOException;
import java.io.InputStream;
import java.nio.Buffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

final class Native {
    private Native() {}

    static final String LIB = "libwispjni.so";

    static {
        load();
    }

    static String platform() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
        if (os.startsWith("linux")) os = "linux";
        if (arch.equals("amd64") || arch.equals("x86_64")) arch = "x86_64";
        else if (arch.equals("aarch64") || arch.equals("arm64")) arch = "aarch64";
        return os + "-" + arch;
    }

    private static void load() {
        String explicit = System.getProperty("wisp.native.lib");
        if (explicit != null && !explicit.isEmpty()) {
            System.load(Path.of(explicit).toAbsolutePath().toString());
            return;
        }
        String resource = "/wisp/native/" + platform() + "/" + LIB;
        try (InputStream in = Native.class.getResourceAsStream(resource)) {
            if (in == null)
                throw new UnsatisfiedLinkError("wisp: this jar has no native library for " + platform()
                        + " (looked for " + resource + "; set -Dwisp.native.lib=/path/to/" + LIB + ")");
            Path dir = Files.createTempDirectory("wisp-jni");
            Path lib = dir.resolve(LIB);
            Files.copy(in, lib, StandardCopyOption.REPLACE_EXISTING);
            System.load(lib.toAbsolutePath().toString());
            // the mapping stays valid once loaded: the file and its directory can go now
            Files.deleteIfExists(lib);
            Files.deleteIfExists(dir);
        } catch (IOException e) {
            UnsatisfiedLinkError u = new UnsatisfiedLinkError("wisp: cannot extract " + resource + ": " + e.getMessage());
            u.initCause(e);
            throw u;
        }
    }

    // engine
    static native long engine(int threads);
    static native String version();
    static native int engineThreads();
    static native String[] devices();
    static native String[] statNames();
    static native String errName(int status);

    // host memory for Batch.allocate (wisp_engine_host_alloc/free/pinned)
    static native java.nio.ByteBuffer hostAlloc(long bytes);
    static native long bufferAddress(Buffer b);
    static native boolean hostPinned(long address);
    static native void hostFree(long address);

    // models
    static native long modelLoad(String path);
    static native void modelFree(long m);
    static native long modelNumFeatures(long m);
    static native double modelBias(long m);
    static native String modelDtype(long m);
    static native String modelPath(long m);
    static native String modelMetaText(long m);
    static native String modelColumns(long m);
    static native String modelMeta(long m, String key);
    static native float modelWeight(long m, long id);
    static native void modelWrite(String path, float[] weights, double bias, String dtype, String meta, String columns);

    // sessions
    static native long sessionNew(long m, String device);
    static native void sessionFree(long s);
    static native String sessionDevice(long s);
    static native String sessionLastDevice(long s);
    static native void sessionSetDevice(long s, String device);
    static native long[] sessionStats(long s);
    static native void sessionResetStats(long s);

    // scoring: each returns the bad rows as "ROW\tMESSAGE" (null when none)
    static native String[] scoreArrays(long s, int[] indptr, int[] indices, float[] values, float[] out);
    static native String[] scoreDirect(long s, Buffer indptr, long ptrOff, Buffer indices, long idxOff, long idxLen,
                                       Buffer values, long valOff, long valLen, int rows, float[] out, Buffer outBuf,
                                       long outOff);

    // feature columns and raw batches
    static native long columnsNew(long m);
    static native void columnsFree(long c);
    static native String[] columnsInputs(long c);
    static native long rawNew(long c);
    static native void rawFree(long r);
    static native String[] scoreRaw(long s, long raw, int rows, int[] rowStart, int[] input, byte[] kind, double[] dv,
                                    long[] lv, byte[] str, int[] strOff, String[] rejects, float[] out);
}
