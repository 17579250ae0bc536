"""kserve_ref.py — KServe's reference server (kserve.ModelServer) serving a small scikit-learn logistic
regression over the v2 REST protocol: `python spec/v2/kserve_ref.py HTTP_PORT`. test_kserve_ref.py starts
it and compares the shapes (keys, types) of its metadata and error answers with wisp's."""
import sys

import numpy as np
import kserve
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer
from sklearn.linear_model import LogisticRegression


class SklearnLR(Model):
    def __init__(self, name):
        super().__init__(name)
        self.load()

    def load(self):
        rs = np.random.RandomState(0)
        x = rs.rand(200, 4).astype(np.float32)
        y = (x[:, 0] + 0.3 * x[:, 1] > 0.6).astype(int)
        self.model = LogisticRegression().fit(x, y)
        self.ready = True
        return self.ready

    def get_input_types(self):
        return [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}]

    def get_output_types(self):
        return [{"name": "probability", "datatype": "FP32", "shape": [-1]}]

    def predict(self, payload, headers=None, response_headers=None):
        if not isinstance(payload, InferRequest):
            raise kserve.errors.InvalidInput("a v2 inference request expected")
        x = payload.inputs[0].as_numpy()
        if x.ndim != 2 or x.shape[1] != 4:
            raise kserve.errors.InvalidInput("input-0: shape [n, 4] expected, got %s" % (list(x.shape),))
        p = self.model.predict_proba(x)[:, 1].astype(np.float32)
        out = InferOutput(name="probability", shape=list(p.shape), datatype="FP32")
        out.set_data_from_numpy(p, binary_data=False)
        return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id)


if __name__ == "__main__":
    port = int(sys.argv[1])
    ModelServer(http_port=port, grpc_port=port + 1, enable_grpc=False, workers=1).start([SklearnLR("sk")])
