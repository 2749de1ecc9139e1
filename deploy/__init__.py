"""One ONNX model, start to finish: intake, tuning, build, verification, artifact."""
