// examples/spark/scorer.scala — the batched JVM path from spark-shell: FeatureHasher rows scored by wisp.spark.WispScorer (prints 3 rows, the bad-row count and the opens).
//
//   make demo    # build/demo/liblinear.wisp
//   PATH=$PWD/build/spark-venv/bin:$PATH spark-shell --master 'local[2]' \
//       --driver-java-options -Dwisp.threads=1 --jars build/wisp.jar,build/wisp-spark.jar < examples/spark/scorer.scala
import org.apache.spark.ml.feature.FeatureHasher
import scala.jdk.CollectionConverters._

val model = sys.env.getOrElse("WISP_MODEL", "build/demo/liblinear.wisp")
val raw = spark.range(0, 100000, 1, 4).selectExpr("id", "cast(id % 7 as string) as c", "id / 1000.0 as x")
val df = new FeatureHasher().setInputCols("c", "x").setOutputCol("features").setNumFeatures(1 << 10).transform(raw)
val scored = wisp.spark.WispScorer.transform(df, model, "features", "probability",
  Map("batchRows" -> "4096", "device" -> "cpu").asJava)
scored.select("id", "probability", "probability_error").show(3)
println("bad rows: " + scored.filter("probability is null").count() + ", opens: " + wisp.spark.WispScorer.opens(model))
