// WispUDF.java — the JVM path of wisp in Spark: wisp_score(features) / wisp_score_error(features) for Spark SQL over the Java binding, the model opened once per executor JVM.
package wisp.spark;

import java.io.File;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.spark.SparkFiles;
import org.apache.spark.TaskContext;
import org.apache.spark.resource.ResourceInformation;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.types.DataTypes;

import wisp.BadRow;
import wisp.Model;
import wisp.Session;

/**
 * Spark SQL functions over a .wisp model, for pipelines that are not in Python:
 *
 * <pre>
 *   WispUDF.register(spark, "wisp_score", "/models/ctr.wisp", "auto");
 *   spark.sql("SELECT id, wisp_score(features) AS p, wisp_score_error(features) AS why FROM t");
 * </pre>
 *
 * register() ships the file with SparkContext.addFile (executors read SparkFiles.get(name),
 * or the path itself where SparkFiles has no such file: a shared path) and registers two
 * functions: NAME(features) -> float, the probability (null for a bad row), and
 * NAME_error(features) -> string, why the row is bad (null when it is not).
 *
 * features: an MLlib vector (org.apache.spark.ml.linalg SparseVector / DenseVector: index j is
 * feature id j, a dense vector's zero entries skipped) or an array of int/bigint feature ids
 * (binary features). A null input, a negative id and a value that is not a finite float32 make a
 * bad row (the engine's checks: each row goes to wisp_batch_from_csr); ids at or beyond the
 * model's table, beyond int32 too, are ignored.
 *
 * The model is opened once per executor JVM (a static map keyed by the file and its size and
 * modification time; {@link #opens} counts the opens); each task thread scores on a session of
 * its own (sessions are one thread at a time). A row is one engine call (Spark SQL hands a UDF one
 * row at a time): about a microsecond of JNI and engine overhead a row (engine/bindings/java/README.md).
 * device "auto": the GPU Spark assigned to the task (TaskContext resources "gpu"), else the CPU.
 */
public final class WispUDF implements UDF1<Object, Float> {
    private static final long serialVersionUID = 1L;

    private static final ConcurrentHashMap<String, Model> MODELS = new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<String, AtomicInteger> OPENS = new ConcurrentHashMap<>();
    private static final ThreadLocal<Map<String, Session>> SESSIONS = ThreadLocal.withInitial(HashMap::new);
    private static final ThreadLocal<String> LAST_ERROR = new ThreadLocal<>();
    // this thread's last (UDF instance, task, session): the per-row fast path skips the lookups
    private static final ThreadLocal<Object[]> LAST = ThreadLocal.withInitial(() -> new Object[3]);

    final String path;        // the path on the driver
    final String shipped;     // the name given to SparkContext.addFile, or null
    final String device;

    WispUDF(String path, String shipped, String device) {
        this.path = path;
        this.shipped = shipped;
        this.device = device;
    }

    /** The reason column's function: why a row is bad, null when it scores. */
    public static final class Error implements UDF1<Object, String> {
        private static final long serialVersionUID = 1L;
        final WispUDF scorer;

        Error(WispUDF scorer) {
            this.scorer = scorer;
        }

        @Override
        public String call(Object features) {
            Float p = scorer.call(features);
            return p == null ? LAST_ERROR.get() : null;
        }
    }

    /** register(spark, name, modelPath, "auto"). */
    public static void register(SparkSession spark, String name, String modelPath) {
        register(spark, name, modelPath, "auto", true);
    }

    /** register(spark, name, modelPath, device, true). */
    public static void register(SparkSession spark, String name, String modelPath, String device) {
        register(spark, name, modelPath, device, true);
    }

    /**
     * Registers NAME(features) -> float and NAME_error(features) -> string over the model at
     * modelPath (opened here once to validate it: a bad file fails now, on the driver).
     * ship: SparkContext.addFile(modelPath) (executors without the path get the file); false: every
     * executor reads modelPath (a shared path).
     */
    public static void register(SparkSession spark, String name, String modelPath, String device, boolean ship) {
        String abs = new File(modelPath).getAbsolutePath();
        try (Model m = Model.load(abs)) {
            if (m.columns() != null)
                throw new IllegalArgumentException("wisp_score: " + abs + " has feature columns; the SQL function "
                        + "scores feature ids (vectors or id arrays); use wisp.spark.WispModel for raw columns");
        }
        String shippedName = null;
        if (ship) {
            spark.sparkContext().addFile(abs);
            shippedName = new File(abs).getName();
        }
        WispUDF f = new WispUDF(abs, shippedName, device);
        spark.udf().register(name, f, DataTypes.FloatType);
        spark.udf().register(name + "_error", new Error(f), DataTypes.StringType);
    }

    /** How many times this JVM opened a model file whose driver path is path (for the specs). */
    public static int opens(String path) {
        int n = 0;
        String abs = new File(path).getAbsolutePath();
        for (Map.Entry<String, AtomicInteger> e : OPENS.entrySet())
            if (e.getKey().startsWith(abs + "\u0000")) n += e.getValue().get();
        return n;
    }

    /** The device a task picks for "auto" given the GPU addresses Spark assigned it (null or empty: none). */
    public static String taskDevice(String device, String[] gpuAddresses, String cudaVisibleDevices) {
        if (!"auto".equals(device)) return device;
        if (gpuAddresses == null || gpuAddresses.length == 0) return "cpu";
        String addr = gpuAddresses[0].trim();
        if (cudaVisibleDevices != null && !cudaVisibleDevices.isEmpty()) {
            String[] listed = cudaVisibleDevices.split(",");
            for (int i = 0; i < listed.length; i++)
                if (listed[i].trim().equals(addr)) return "gpu:" + i;
        }
        try {
            return "gpu:" + Integer.parseInt(addr);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("wisp_score: Spark assigned GPU address '" + addr
                    + "', not a device number (and CUDA_VISIBLE_DEVICES does not list it)");
        }
    }

    /** device for the running task: "auto" becomes the GPU Spark assigned to it (WispScorer's too). */
    static String taskDevice(String device) {
        String[] addrs = null;
        TaskContext tc = TaskContext.get();
        if (tc != null) {
            ResourceInformation gpu = tc.resourcesJMap().get("gpu");
            if (gpu != null) addrs = gpu.addresses();
        }
        return taskDevice(device, addrs, System.getenv("CUDA_VISIBLE_DEVICES"));
    }

    /** The file to open here: the shipped copy (SparkFiles) when there is one, else path (WispScorer's too). */
    static String localPath(String path, String shipped) {
        if (shipped != null) {
            try {
                File f = new File(SparkFiles.get(shipped));
                if (f.canRead()) return f.getPath();
            } catch (RuntimeException e) {
                // no SparkEnv (not inside Spark): the path itself
            }
        }
        return path;
    }

    /** The session of this thread for this UDF and task: looked up (device, file, model) once per task. */
    private Session taskSession() {
        TaskContext tc = TaskContext.get();
        Object[] last = LAST.get();
        if (last[0] == this && last[1] == tc && last[2] != null) return (Session) last[2];
        Session s = session();
        last[0] = this;
        last[1] = tc;
        last[2] = s;
        return s;
    }

    private Session session() {
        return sessionFor(path, localPath(path, shipped), taskDevice(device));
    }

    /**
     * This thread's session on the model at local (driver path path) on device dev: the model
     * opened once per JVM for every path into it (this UDF and WispScorer share the cache, so a
     * JVM running both still opens a file once), a session per thread and device.
     */
    static Session sessionFor(String path, String local, String dev) {
        File f = new File(local);
        String key = path + "\u0000" + local + "\u0000" + f.length() + "\u0000" + f.lastModified();
        Map<String, Session> mine = SESSIONS.get();
        Session s = mine.get(key + "\u0000" + dev);
        if (s != null) return s;
        Model m = MODELS.computeIfAbsent(key, k -> {
            OPENS.computeIfAbsent(k, x -> new AtomicInteger()).incrementAndGet();
            return Model.load(local);
        });
        s = m.session(dev);
        mine.put(key + "\u0000" + dev, s);
        return s;
    }

    @Override
    public Float call(Object features) {
        LAST_ERROR.remove();
        if (features == null) return bad("null features");
        int[] ids;
        float[] vals = null;
        if (features instanceof org.apache.spark.ml.linalg.SparseVector) {
            org.apache.spark.ml.linalg.SparseVector v = (org.apache.spark.ml.linalg.SparseVector) features;
            ids = v.indices();
            double[] d = v.values();
            if (d.length != ids.length) return bad("vector: " + ids.length + " indices but " + d.length + " values");
            vals = new float[d.length];
            for (int i = 0; i < d.length; i++) vals[i] = (float) d[i];
        } else if (features instanceof org.apache.spark.ml.linalg.DenseVector) {
            double[] d = ((org.apache.spark.ml.linalg.DenseVector) features).values();
            int nz = 0;
            for (double x : d) if (x != 0.0) nz++;
            ids = new int[nz];
            vals = new float[nz];
            for (int i = 0, k = 0; i < d.length; i++)
                if (d[i] != 0.0) { ids[k] = i; vals[k++] = (float) d[i]; }
        } else if (features instanceof scala.collection.Seq) {
            scala.collection.Seq<?> seq = (scala.collection.Seq<?>) features;
            int n = seq.length();
            ids = new int[n];
            for (int i = 0; i < n; i++) {
                Object o = seq.apply(i);
                if (o == null) return bad("a null id");
                ids[i] = id32(((Number) o).longValue());
            }
        } else {
            throw new IllegalArgumentException("wisp_score: features must be an MLlib vector or an array of int/bigint "
                    + "ids, not " + features.getClass().getName());
        }
        Session s = taskSession();
        float[] p = s.score(new int[] {0, ids.length}, ids, vals);
        if (Float.isNaN(p[0])) {
            List<BadRow> badRows = s.badRows();
            return bad(badRows.isEmpty() ? "scored NaN" : badRows.get(0).message);
        }
        return p[0];
    }

    /**
     * A bigint id as the int32 id the engine reads: beyond int32 it is beyond every table (ignored, as
     * everywhere in wisp), below it negative (the engine makes the row bad, naming -2^31 for ids that
     * far below).
     */
    static int id32(long id) {
        return id > Integer.MAX_VALUE ? Integer.MAX_VALUE : id < Integer.MIN_VALUE ? Integer.MIN_VALUE : (int) id;
    }

    private static Float bad(String why) {
        LAST_ERROR.set(why);
        return null;
    }
}
