"""Graph-level compiler: graph IR, front ends (model zoo, ONNX), graph passes."""
