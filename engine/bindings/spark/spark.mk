# engine/bindings/spark/spark.mk — `make spark`: $(BUILD)/wisp-spark.jar (the Spark SQL function wisp_score and the batched WispScorer over the Java binding) and `make spark-test`; included by the Makefile.
#
#   make spark         $(BUILD)/wisp-spark.jar, compiled against the Spark jars of a pyspark install:
#                      SPARK_JARS=DIR (default: $(BUILD)/spark-venv's pyspark/jars, which
#                      spec/spark/run.sh makes); refused with the reason when there is none
#   make spark-test    spec/spark/run.sh (its venv with pyspark, pip install ., the jar, pytest)
# Neither is part of `all`: without pyspark, `make` builds as before.

SPARK_JARS ?= $(firstword $(wildcard $(BUILD)/spark-venv/lib/python3*/site-packages/pyspark/jars))

.PHONY: spark spark-test
spark: $(BUILD)/wisp.jar
	@[ -n "$(SPARK_JARS)" ] || { echo "make spark: no Spark jars: pip install pyspark (or run spec/spark/run.sh) and/or set SPARK_JARS=.../pyspark/jars" >&2; exit 1; }
	@sh engine/bindings/spark/build.sh $(BUILD) $(SPARK_JARS)

spark-test: $(BUILD)/wisp.jar $(BUILD)/wisp
	@WISP_BUILD=$(BUILD) sh spec/spark/run.sh
