// examples/spark/sql.scala — wisp_score in Spark SQL from Scala (spark-shell), over the Java binding (build/wisp.jar + build/wisp-spark.jar).
//
//   make demo && liblinear-train -s 0 -B 1 -q build/demo/train.libsvm build/demo/liblinear.txt &&
//     build/wisp import liblinear build/demo/liblinear.txt build/demo/liblinear.wisp
//   PATH=$PWD/build/spark-venv/bin:$PATH spark-shell --master 'local[2]' --jars build/wisp.jar,build/wisp-spark.jar < examples/spark/sql.scala
//
// Prints p = 0.27644065 and 0.2802527, what `printf '0 1:1 3:1\n0 5:2\n' | build/wisp score -m build/demo/liblinear.wisp` prints.
import org.apache.spark.ml.linalg.Vectors
wisp.spark.WispUDF.register(spark, "wisp_score", "build/demo/liblinear.wisp")
spark.createDataFrame(Seq((1, Vectors.sparse(10, Array(1, 3), Array(1.0, 1.0))), (2, Vectors.sparse(10, Array(5), Array(2.0))))).toDF("id", "features").createOrReplaceTempView("events")
spark.sql("SELECT id, wisp_score(features) AS p, wisp_score_error(features) AS why FROM events").show()
