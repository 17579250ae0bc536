"""test_device.py — device="auto" inside Spark: the GPU Spark assigned to the task (its address, or its position in
CUDA_VISIBLE_DEVICES), the CPU without one; the resources as a Spark resources file names them. CPU only: the device
string a task would pick is checked, not a GPU (a GPU session without a GPU falls back to the CPU)."""
import json

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors
from pyspark.resource import ResourceInformation

from wisp.spark import WispModel, task_device


def test_auto_takes_the_tasks_gpu_address():
    res = {"gpu": ResourceInformation("gpu", ["3"])}
    assert task_device("auto", res, env={}) == "gpu:3"
    assert task_device("auto", {"gpu": ResourceInformation("gpu", ["2", "5"])}, env={}) == "gpu:2"


def test_auto_maps_through_cuda_visible_devices():
    res = {"gpu": ResourceInformation("gpu", ["5"])}
    assert task_device("auto", res, env={"CUDA_VISIBLE_DEVICES": "4,5,6"}) == "gpu:1"
    assert task_device("auto", res, env={"CUDA_VISIBLE_DEVICES": "0,1"}) == "gpu:5"     # not listed: the address
    uuid = {"gpu": ResourceInformation("gpu", ["GPU-8f2a"])}
    assert task_device("auto", uuid, env={"CUDA_VISIBLE_DEVICES": "GPU-1111,GPU-8f2a"}) == "gpu:1"
    with pytest.raises(ValueError, match="not a device number"):
        task_device("auto", uuid, env={})


def test_auto_without_a_gpu_is_the_cpu_and_names_pass_through():
    assert task_device("auto", {}, env={}) == "cpu"
    assert task_device("auto", {"gpu": ResourceInformation("gpu", [])}, env={}) == "cpu"
    assert task_device("gpu:1", {"gpu": ResourceInformation("gpu", ["3"])}, env={}) == "gpu:1"
    assert task_device("cpu", {"gpu": ResourceInformation("gpu", ["3"])}, env={}) == "cpu"


def test_resources_file_as_spark_writes_it(tmp_path):
    # spark.{driver,worker}.resourcesFile: [{"id": {"componentName", "resourceName"}, "addresses": [...]}]
    f = tmp_path / "resources.json"
    f.write_text(json.dumps([{"id": {"componentName": "spark.executor", "resourceName": "gpu"}, "addresses": ["7"]}]))
    res = {a["id"]["resourceName"]: ResourceInformation(a["id"]["resourceName"], a["addresses"])
           for a in json.loads(f.read_text())}
    assert task_device("auto", res, env={}) == "gpu:7"


def test_tasks_of_local_mode_pick_the_cpu(spark, model_path, stats_dir):
    # local mode assigns no GPU to tasks: "auto" scores on the CPU in every task
    from conftest import read_stats
    picked = spark.sparkContext.parallelize(range(4), 4).mapPartitions(lambda it: [task_device("auto")]).collect()
    assert picked == ["cpu"] * 4
    df = spark.createDataFrame([(i, Vectors.sparse(10, [i % 10], [1.0])) for i in range(40)], ["row", "features"])
    assert WispModel(modelPath=model_path).transform(df).filter("probability is not null").count() == 40
    devices = {}
    for st in read_stats(stats_dir):
        for d, n in st["devices"].items():
            devices[d] = devices.get(d, 0) + n
    assert set(devices) == {"cpu"}, devices


@pytest.mark.skipif(not any(d.get("usable") for d in __import__("wisp").devices()[1:]), reason="no usable GPU")
def test_gpu_session_equals_cpu(spark, model_path):
    df = spark.createDataFrame([(i, Vectors.sparse(1000, [i % 1000, (7 * i) % 1000], [1.0, 0.5])) for i in range(500)],
                               ["row", "features"])
    cpu = [r.probability for r in WispModel(modelPath=model_path, device="cpu").transform(df).orderBy("row").collect()]
    gpu = [r.probability for r in WispModel(modelPath=model_path, device="gpu:0").transform(df).orderBy("row").collect()]
    np.testing.assert_allclose(gpu, cpu, rtol=0, atol=1e-6)
