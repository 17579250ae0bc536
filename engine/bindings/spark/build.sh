#!/bin/sh
# engine/bindings/spark/build.sh — builds $BUILD/wisp-spark.jar (package wisp.spark: the Spark SQL function and the batched WispScorer over the Java binding) against the Spark jars of the pyspark wheel.
#
#   sh engine/bindings/spark/build.sh BUILD SPARK_JARS_DIR      (SPARK_JARS_DIR: site-packages/pyspark/jars)
#
# Needs $BUILD/wisp.jar (make BUILD=$BUILD java) and javac 17+. Nothing from a Maven repository:
# the Spark, Scala and MLlib classes come from the pyspark wheel's jars, which Spark puts on the
# class path at run time anyway. Prints the jar's path on success.
set -u
BUILD=$1 JARS=$2
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
[ -f "$BUILD/wisp.jar" ] || { echo "engine/bindings/spark/build.sh: $BUILD/wisp.jar is missing (make BUILD=$BUILD java)" >&2; exit 1; }
ls "$JARS"/spark-sql_*.jar >/dev/null 2>&1 || { echo "engine/bindings/spark/build.sh: no Spark jars in $JARS (pip install pyspark)" >&2; exit 1; }
out=$BUILD/spark/classes
rm -rf "$out" && mkdir -p "$out" || exit 1
javac --release 17 -Xlint:all,-processing,-classfile,-path -Werror -d "$out" -cp "$BUILD/wisp.jar:$JARS/*" \
    "$ROOT"/engine/bindings/spark/src/wisp/spark/*.java || { echo "engine/bindings/spark/build.sh: javac failed" >&2; exit 1; }
jar --create --file "$BUILD/wisp-spark.jar" -C "$out" . || exit 1
echo "$BUILD/wisp-spark.jar"
