// WispScorer.java — the batched JVM path of wisp in Spark: a Dataset's vector (or ids) column scored N rows per JNI call over direct buffers, the model opened once per executor JVM; and Spark's own floors for the same pass.
package wisp.spark;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.ml.linalg.VectorUDT;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeArrayData;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

import wisp.Batch;
import wisp.BadRow;
import wisp.Model;
import wisp.Session;

/**
 * transform(df) = df + outputCol (float: the probability, null for a bad row) + errorCol
 * (string: why the row is bad, null when it is not), for Scala/Java/PySpark pipelines:
 *
 * <pre>
 *   Dataset&lt;Row&gt; scored = WispScorer.transform(df, "/models/ctr.wisp", "features", "probability");
 *   // options: valuesCol, errorCol (default outputCol + "_error"), device ("auto"),
 *   //          batchRows (4096), errors ("null" | "raise"), ship ("true")
 *   Dataset&lt;Row&gt; s2 = WispScorer.transform(df, path, "ids", "p", Map.of("valuesCol", "vals", "batchRows", "8192"));
 * </pre>
 *
 * inputCol: an MLlib vector column (VectorUDT: SparseVector / DenseVector; index j is feature id j,
 * a dense vector's zero entries are skipped) or array&lt;int|bigint|smallint|tinyint&gt; feature ids,
 * with valuesCol an array&lt;float|double&gt; of their values (binary features without it).
 *
 * How it runs: over the Dataset's internal rows (queryExecution().toRdd(), mapPartitions; no
 * Row objects, no vector objects): each task gathers batchRows rows into one {@link Batch} of
 * direct buffers (indices and float32 values read straight from Spark's UnsafeArrayData) and makes
 * ONE engine call for them (Session.score(Batch, FloatBuffer)), then hands the rows back with the
 * two columns appended. The model is opened once per executor JVM ({@link #opens}); each task
 * thread scores on a session of its own. The engine's CPU threads are the JVM's (-Dwisp.threads,
 * default one per core): on executors that run one task a core, -Dwisp.threads=1 in
 * spark.executor.extraJavaOptions (spark.driver.extraJavaOptions in local mode) avoids
 * oversubscription.
 *
 * Bad rows stay rows (the same reasons as wisp.spark.WispModel): a null vector or ids array, a
 * null id or value, ids and values of different lengths, what the engine refuses (a negative id, a
 * value that is not a finite float32: the batch goes to wisp_batch_from_csr as it is, which checks
 * it). errors "raise" fails the task instead (naming the row). Ids at or beyond the model's table
 * are ignored, as everywhere in wisp; ids beyond int32 likewise (WispUDF.id32).
 *
 * {@link #floor} runs the same pass (internal rows, or Spark's public Row encoder) without wisp:
 * what Spark itself costs for it (bench_spark.py measures both beside MLlib).
 */
public final class WispScorer {
    private WispScorer() {}

    static final int DEFAULT_BATCH_ROWS = 4096;

    /** driver: (SparkContext, path, size, mtime) -> the name given to addFile */
    private static final ConcurrentHashMap<String, String> SHIPPED = new ConcurrentHashMap<>();

    // input kinds
    static final int VECTOR = 0, IDS = 1;
    // element kinds of an ids / values array
    static final int I8 = 0, I16 = 1, I32 = 2, I64 = 3, F32 = 4, F64 = 5;

    /** transform(df, modelPath, inputCol, outputCol, {}) */
    public static Dataset<Row> transform(Dataset<Row> df, String modelPath, String inputCol, String outputCol) {
        return transform(df, modelPath, inputCol, outputCol, new HashMap<>());
    }

    /**
     * Scores df's inputCol with the model at modelPath (validated here, on the driver). options:
     * valuesCol, errorCol, device, batchRows, errors, ship (see the class comment).
     */
    public static Dataset<Row> transform(Dataset<Row> df, String modelPath, String inputCol, String outputCol,
            Map<String, String> options) {
        Map<String, String> opt = options == null ? new HashMap<>() : new HashMap<>(options);
        for (String k : opt.keySet())
            if (!List.of("valuesCol", "errorCol", "device", "batchRows", "errors", "ship").contains(k))
                throw new IllegalArgumentException("WispScorer: unknown option '" + k
                        + "' (valuesCol, errorCol, device, batchRows, errors, ship)");
        String valuesCol = opt.getOrDefault("valuesCol", "");
        String errorCol = opt.getOrDefault("errorCol", "");
        if (errorCol.isEmpty()) errorCol = outputCol + "_error";
        String device = opt.getOrDefault("device", "auto");
        String errors = opt.getOrDefault("errors", "null");
        if (!errors.equals("null") && !errors.equals("raise"))
            throw new IllegalArgumentException("WispScorer: errors must be \"null\" or \"raise\", not \"" + errors + "\"");
        int batchRows;
        try {
            batchRows = Integer.parseInt(opt.getOrDefault("batchRows", Integer.toString(DEFAULT_BATCH_ROWS)));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("WispScorer: batchRows must be an integer, not '" + opt.get("batchRows") + "'");
        }
        if (batchRows <= 0) batchRows = DEFAULT_BATCH_ROWS;
        boolean ship = Boolean.parseBoolean(opt.getOrDefault("ship", "true"));

        StructType schema = df.schema();
        for (String c : new String[] {outputCol, errorCol})
            if (List.of(schema.fieldNames()).contains(c))
                throw new IllegalArgumentException("WispScorer: output column '" + c + "' already exists");
        int col = fieldIndex(schema, inputCol, "inputCol");
        DataType t = schema.fields()[col].dataType();
        int kind, idKind = I32, valCol = -1, valKind = F32;
        if (t instanceof VectorUDT) {
            if (!valuesCol.isEmpty())
                throw new IllegalArgumentException("WispScorer: valuesCol goes with an ids column, not the vector column '" + inputCol + "'");
            kind = VECTOR;
        } else if (t instanceof ArrayType && intKind(((ArrayType) t).elementType()) >= 0) {
            kind = IDS;
            idKind = intKind(((ArrayType) t).elementType());
            if (!valuesCol.isEmpty()) {
                valCol = fieldIndex(schema, valuesCol, "valuesCol");
                DataType vt = schema.fields()[valCol].dataType();
                DataType ve = vt instanceof ArrayType ? ((ArrayType) vt).elementType() : null;
                if (!(ve instanceof FloatType || ve instanceof DoubleType))
                    throw new IllegalArgumentException("WispScorer: valuesCol '" + valuesCol + "' is " + vt.simpleString()
                            + "; it must be array<float> or array<double>");
                valKind = ve instanceof FloatType ? F32 : F64;
            }
        } else {
            throw new IllegalArgumentException("WispScorer: inputCol '" + inputCol + "' is " + t.simpleString()
                    + "; it must be an MLlib vector or array<int|bigint> ids");
        }
        String abs = new File(modelPath).getAbsolutePath();
        try (Model m = Model.load(abs)) {
            if (m.columns() != null)
                throw new IllegalArgumentException("WispScorer: " + abs + " has feature columns; this path scores "
                        + "feature ids (vectors or id arrays); use wisp.spark.WispModel for raw columns");
        }
        org.apache.spark.sql.classic.Dataset<Row> cds = classic(df);
        String shipped = ship ? ship(cds.sparkSession().sparkContext(), abs) : null;
        Config cfg = new Config(abs, shipped, device, batchRows, errors.equals("raise"), kind, col, idKind, valCol, valKind,
                schema.fields().length);
        StructType out = schema.add(outputCol, DataTypes.FloatType, true).add(errorCol, DataTypes.StringType, true);
        RDD<InternalRow> rows = cds.queryExecution().toRdd().toJavaRDD().mapPartitions(new Score(cfg)).rdd();
        return cds.sparkSession().internalCreateDataFrame(rows, out, false);
    }

    /** How many times this JVM opened a model file whose driver path is path (for the specs). */
    public static int opens(String path) {
        return WispUDF.opens(path);     // one cache for the JVM's paths (WispUDF.sessionFor)
    }

    /**
     * Spark's own floor for this pass, no wisp: df + outputCol (double) over the same machinery.
     * how: "pass" (every row handed back with a constant 1.0 added) or "read" (the vector's
     * indices and values read as the scorer reads them: outputCol = the sum of the values plus the
     * sum of the indices); engine: "internal" (internal rows, as transform runs) or "row" (the
     * public Dataset.mapPartitions with a Row encoder: Row and vector objects made and encoded
     * back for every row).
     */
    public static Dataset<Row> floor(Dataset<Row> df, String inputCol, String outputCol, String how, String engine) {
        StructType schema = df.schema();
        int col = fieldIndex(schema, inputCol, "inputCol");
        if (!(schema.fields()[col].dataType() instanceof VectorUDT))
            throw new IllegalArgumentException("WispScorer.floor: inputCol '" + inputCol + "' is not an MLlib vector");
        boolean read;
        if (how.equals("pass")) read = false;
        else if (how.equals("read")) read = true;
        else throw new IllegalArgumentException("WispScorer.floor: how is \"pass\" or \"read\", not \"" + how + "\"");
        StructType out = schema.add(outputCol, DataTypes.DoubleType, true);
        if (engine.equals("row"))
            return df.mapPartitions(new RowFloor(col, read), Encoders.row(out));
        if (!engine.equals("internal"))
            throw new IllegalArgumentException("WispScorer.floor: engine is \"internal\" or \"row\", not \"" + engine + "\"");
        org.apache.spark.sql.classic.Dataset<Row> cds = classic(df);
        RDD<InternalRow> rows = cds.queryExecution().toRdd().toJavaRDD().mapPartitions(new InternalFloor(col, read)).rdd();
        return cds.sparkSession().internalCreateDataFrame(rows, out, false);
    }

    // ---- driver helpers ---------------------------------------------------------------------

    private static org.apache.spark.sql.classic.Dataset<Row> classic(Dataset<Row> df) {
        if (!(df instanceof org.apache.spark.sql.classic.Dataset))
            throw new IllegalArgumentException("WispScorer: needs a classic (not Spark Connect) Dataset, not "
                    + df.getClass().getName());
        return (org.apache.spark.sql.classic.Dataset<Row>) df;
    }

    private static int fieldIndex(StructType schema, String name, String what) {
        String[] names = schema.fieldNames();
        for (int i = 0; i < names.length; i++)
            if (names[i].equals(name)) return i;
        throw new IllegalArgumentException("WispScorer: " + what + " '" + name + "' is not a column of the Dataset (columns: "
                + String.join(", ", names) + ")");
    }

    private static int intKind(DataType t) {
        if (t instanceof IntegerType) return I32;
        if (t instanceof LongType) return I64;
        if (t instanceof ShortType) return I16;
        if (t instanceof ByteType) return I8;
        return -1;
    }

    /** Ships the file under CHECKSUM-NAME (two files of one name, or two versions of one path, never collide). */
    private static String ship(SparkContext sc, String abs) {
        File f = new File(abs);
        String key = System.identityHashCode(sc) + "\u0000" + abs + "\u0000" + f.length() + "\u0000" + f.lastModified();
        return SHIPPED.computeIfAbsent(key, k -> {
            try {
                String name = checksum(abs).substring(0, 16) + "-" + f.getName();
                Path dir = Files.createTempDirectory("wisp-spark-");
                Path dst = dir.resolve(name);
                try {
                    Files.createLink(dst, f.toPath());
                } catch (IOException | UnsupportedOperationException e) {
                    Files.copy(f.toPath(), dst);
                }
                dst.toFile().deleteOnExit();
                dir.toFile().deleteOnExit();
                sc.addFile(dst.toString());
                return name;
            } catch (IOException e) {
                throw new IllegalArgumentException("WispScorer: cannot stage " + abs + " for SparkContext.addFile: " + e, e);
            }
        });
    }

    private static String checksum(String path) throws IOException {
        MessageDigest md;
        try {
            md = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        byte[] buf = new byte[1 << 16];
        try (InputStream in = Files.newInputStream(Path.of(path))) {
            for (int n; (n = in.read(buf)) > 0; ) md.update(buf, 0, n);
        }
        StringBuilder sb = new StringBuilder();
        for (byte b : md.digest()) sb.append(String.format("%02x", b));
        return sb.toString();
    }

    // ---- executor side ----------------------------------------------------------------------

    static final class Config implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final String path, shipped, device;
        final int batchRows, kind, col, idKind, valCol, valKind, width;
        final boolean raise;

        Config(String path, String shipped, String device, int batchRows, boolean raise, int kind, int col, int idKind,
                int valCol, int valKind, int width) {
            this.path = path;
            this.shipped = shipped;
            this.device = device;
            this.batchRows = batchRows;
            this.raise = raise;
            this.kind = kind;
            this.col = col;
            this.idKind = idKind;
            this.valCol = valCol;
            this.valKind = valKind;
            this.width = width;
        }

        /** This thread's session on the model (opened once per JVM). */
        Session session() {
            return WispUDF.sessionFor(path, WispUDF.localPath(path, shipped), WispUDF.taskDevice(device));
        }
    }

    /** One partition: rows gathered batchRows at a time, each batch one engine call. */
    static final class Score implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
        private static final long serialVersionUID = 1L;
        final Config cfg;

        Score(Config cfg) {
            this.cfg = cfg;
        }

        @Override
        public Iterator<InternalRow> call(Iterator<InternalRow> in) {
            return new Scored(cfg, in);
        }
    }

    static final class Scored implements Iterator<InternalRow> {
        final Config cfg;
        final Iterator<InternalRow> in;
        final Session session;
        final InternalRow[] rows;
        final String[] why;
        final int partition;
        final boolean valued;
        long seen;                  // rows of this partition before the current batch
        int n, next;                // rows in the batch, the next to hand out
        // the batch gathered on the heap (bulk reads from Spark's arrays), then copied in one go each
        // into the direct buffers of the Batch the engine reads
        final int[] ptr;
        int[] idx;
        float[] val;
        Batch batch;                // direct buffers, batchRows rows, nnz capacity batchCap
        int batchCap;
        final FloatBuffer out;

        Scored(Config cfg, Iterator<InternalRow> in) {
            this.cfg = cfg;
            this.in = in;
            this.session = cfg.session();
            this.rows = new InternalRow[cfg.batchRows];
            this.why = new String[cfg.batchRows];
            this.valued = cfg.kind == VECTOR || cfg.valCol >= 0;
            this.ptr = new int[cfg.batchRows + 1];
            this.idx = new int[cfg.batchRows * 64];
            this.val = valued ? new float[idx.length] : null;
            TaskContext tc = TaskContext.get();
            this.partition = tc == null ? -1 : tc.partitionId();
            this.out = java.nio.ByteBuffer.allocateDirect(4 * cfg.batchRows).order(java.nio.ByteOrder.nativeOrder())
                    .asFloatBuffer();
            if (tc != null) tc.addTaskCompletionListener(t -> { if (batch != null) batch.close(); });
        }

        private void ensure(int need) {
            if (need <= idx.length) return;
            int cap = Math.max(need, idx.length * 2);
            idx = java.util.Arrays.copyOf(idx, cap);
            if (valued) val = java.util.Arrays.copyOf(val, cap);
        }

        @Override
        public boolean hasNext() {
            if (next < n) return true;
            fill();
            return n > 0;
        }

        @Override
        public InternalRow next() {
            if (!hasNext()) throw new NoSuchElementException();
            int r = next++;
            InternalRow row = rows[r];
            rows[r] = null;
            Object p = why[r] == null ? (Object) out.get(r) : null;
            Object e = why[r] == null ? null : UTF8String.fromString(why[r]);
            return new JoinedRow(row, new GenericInternalRow(new Object[] {p, e}));
        }

        private void fill() {
            seen += n;
            n = 0;
            next = 0;
            int nnz = 0;
            while (n < cfg.batchRows && in.hasNext()) {
                InternalRow row = in.next().copy();      // the scan reuses its row object
                why[n] = null;
                int k = cfg.kind == VECTOR ? addVector(row, nnz) : addIds(row, nnz);
                if (k < 0) k = nnz;                      // a bad row: no features, nulled after scoring
                rows[n++] = row;
                nnz = k;
                ptr[n] = nnz;
            }
            if (n == 0) return;
            if (batch == null || nnz > batchCap) {
                if (batch != null) batch.close();
                batchCap = Math.max(nnz, idx.length);
                batch = Batch.allocate(cfg.batchRows, batchCap, valued);
            }
            IntBuffer bp = batch.indptr(), bi = batch.indices();
            bp.put(0, ptr, 0, n + 1);
            bi.put(0, idx, 0, nnz);
            if (valued) batch.values().put(0, val, 0, nnz);
            // the batch's first n rows and nnz features: views of the allocated memory, their limits the
            // lengths the engine reads (wisp_batch_from_csr: indices exactly indptr[n] long)
            Batch b = Batch.wrap(bp.duplicate().limit(n + 1), bi.duplicate().limit(nnz),
                    valued ? batch.values().duplicate().limit(nnz) : null);
            session.score(b, out);
            b.close();
            for (BadRow br : session.badRows()) if (why[br.row] == null) why[br.row] = br.message;
            if (cfg.raise)
                for (int r = 0; r < n; r++)
                    if (why[r] != null)
                        throw new IllegalArgumentException("wisp: bad row " + (seen + r) + " of partition " + partition
                                + ": " + why[r]);
        }

        private int bad(String reason) {
            why[n] = reason;
            return -1;
        }

        /** Appends an MLlib vector's features at nnz; returns the new nnz, or -1 for a bad row. */
        private int addVector(InternalRow row, int nnz) {
            if (row.isNullAt(cfg.col)) return bad("null vector");
            InternalRow v = row.getStruct(cfg.col, 4);
            ArrayData vals = v.isNullAt(3) ? null : v.getArray(3);
            if (v.getByte(0) == 1) {                     // dense: ids 0..len-1, zero entries skipped
                if (vals == null) return bad("null vector");
                int len = vals.numElements();
                ensure(nnz + len);
                for (int i = 0; i < len; i++) {
                    double x = vals.getDouble(i);
                    if (x != 0.0) {
                        idx[nnz] = i;
                        val[nnz++] = (float) x;
                    }
                }
                return nnz;
            }
            ArrayData ids = v.isNullAt(2) ? null : v.getArray(2);
            if (ids == null || vals == null) return bad("null vector");
            int len = ids.numElements();
            if (vals.numElements() != len) return bad("vector: " + len + " indices but " + vals.numElements() + " values");
            ensure(nnz + len);
            if (ids instanceof UnsafeArrayData && vals instanceof UnsafeArrayData) {
                // Spark's own layout (8-byte count, null bits, the elements): the ids copied as a block,
                // the values narrowed to float32 in one loop
                UnsafeArrayData ui = (UnsafeArrayData) ids, uv = (UnsafeArrayData) vals;
                long head = UnsafeArrayData.calculateHeaderPortionInBytes(len);
                Platform.copyMemory(ui.getBaseObject(), ui.getBaseOffset() + head, idx,
                        Platform.INT_ARRAY_OFFSET + 4L * nnz, 4L * len);
                Object vb = uv.getBaseObject();
                long vo = uv.getBaseOffset() + head;
                for (int i = 0; i < len; i++) val[nnz + i] = (float) Platform.getDouble(vb, vo + 8L * i);
                return nnz + len;                        // a negative id: the engine makes the row bad
            }
            for (int i = 0; i < len; i++) {
                idx[nnz + i] = ids.getInt(i);
                val[nnz + i] = (float) vals.getDouble(i);
            }
            return nnz + len;
        }

        /** Appends an ids array (and its values) at nnz; returns the new nnz, or -1 for a bad row. */
        private int addIds(InternalRow row, int nnz) {
            if (row.isNullAt(cfg.col)) return bad("null ids");
            ArrayData ids = row.getArray(cfg.col);
            int len = ids.numElements();
            ArrayData vals = null;
            if (cfg.valCol >= 0) {
                if (row.isNullAt(cfg.valCol)) return bad("null values");
                vals = row.getArray(cfg.valCol);
                if (vals.numElements() != len) return bad(len + " ids but " + vals.numElements() + " values");
            }
            ensure(nnz + len);
            for (int i = 0; i < len; i++) {
                if (ids.isNullAt(i)) return bad("a null id");
                long id;
                switch (cfg.idKind) {
                    case I32: id = ids.getInt(i); break;
                    case I64: id = ids.getLong(i); break;
                    case I16: id = ids.getShort(i); break;
                    default: id = ids.getByte(i); break;
                }
                idx[nnz + i] = WispUDF.id32(id);

            }
            if (vals != null) {
                for (int i = 0; i < len; i++) {
                    if (vals.isNullAt(i)) return bad("a null value");
                    val[nnz + i] = cfg.valKind == F32 ? vals.getFloat(i) : (float) vals.getDouble(i);
                }
            }
            return nnz + len;
        }
    }

    // ---- Spark's floors -----------------------------------------------------------------------

    static double readVector(InternalRow v) {
        ArrayData vals = v.getArray(3);
        double s = 0;
        int len = vals.numElements();
        for (int i = 0; i < len; i++) s += vals.getDouble(i);
        if (v.getByte(0) == 0) {
            ArrayData ids = v.getArray(2);
            long t = 0;
            for (int i = 0; i < len; i++) t += ids.getInt(i);
            s += t;
        }
        return s;
    }

    static final class InternalFloor implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
        private static final long serialVersionUID = 1L;
        final int col;
        final boolean read;

        InternalFloor(int col, boolean read) {
            this.col = col;
            this.read = read;
        }

        @Override
        public Iterator<InternalRow> call(Iterator<InternalRow> in) {
            return new Iterator<InternalRow>() {
                @Override
                public boolean hasNext() {
                    return in.hasNext();
                }

                @Override
                public InternalRow next() {
                    InternalRow row = in.next();
                    double x = 1.0;
                    if (read) x = row.isNullAt(col) ? 0.0 : readVector(row.getStruct(col, 4));
                    return new JoinedRow(row, new GenericInternalRow(new Object[] {x}));
                }
            };
        }
    }

    static final class RowFloor implements MapPartitionsFunction<Row, Row> {
        private static final long serialVersionUID = 1L;
        final int col;
        final boolean read;

        RowFloor(int col, boolean read) {
            this.col = col;
            this.read = read;
        }

        @Override
        public Iterator<Row> call(Iterator<Row> in) {
            return new Iterator<Row>() {
                @Override
                public boolean hasNext() {
                    return in.hasNext();
                }

                @Override
                public Row next() {
                    Row row = in.next();
                    double x = read ? 0.0 : 1.0;
                    if (read && !row.isNullAt(col)) {
                        Object v = row.get(col);
                        if (v instanceof org.apache.spark.ml.linalg.SparseVector) {
                            org.apache.spark.ml.linalg.SparseVector sv = (org.apache.spark.ml.linalg.SparseVector) v;
                            long t = 0;
                            for (int i : sv.indices()) t += i;
                            for (double d : sv.values()) x += d;
                            x += t;
                        } else {
                            for (double d : ((org.apache.spark.ml.linalg.Vector) v).toArray()) x += d;
                        }
                    }
                    Object[] vals = new Object[row.length() + 1];
                    for (int i = 0; i < row.length(); i++) vals[i] = row.get(i);
                    vals[row.length()] = x;
                    return RowFactory.create(vals);
                }
            };
        }
    }
}
