"""Reference workloads: the ResNet-18 layers of the TVM paper's Table 2 (C1-C12)."""

from __future__ import annotations

from compiler.ops.conv2d import Conv2dWorkload

__all__ = ["RESNET18_LAYERS", "resnet18_layer"]

RESNET18_LAYERS: dict[str, tuple[int, int, int, int, int]] = {
    "C1": (224, 3, 64, 7, 2),
    "C2": (56, 64, 64, 3, 1),
    "C3": (56, 64, 64, 1, 1),
    "C4": (56, 64, 128, 3, 2),
    "C5": (56, 64, 128, 1, 2),
    "C6": (28, 128, 128, 3, 1),
    "C7": (28, 128, 256, 3, 2),
    "C8": (28, 128, 256, 1, 2),
    "C9": (14, 256, 256, 3, 1),
    "C10": (14, 256, 512, 3, 2),
    "C11": (14, 256, 512, 1, 2),
    "C12": (7, 512, 512, 3, 1),
}
"""Name -> (H = W, in channels, out channels, kernel, stride); padding is kernel // 2."""


def resnet18_layer(name: str, batch: int = 1, bias: bool = True, shift: int = 8,
                   relu: bool = True) -> Conv2dWorkload:
    """The workload of layer ``name`` (``"C1"`` .. ``"C12"``)."""
    h, ci, co, k, s = RESNET18_LAYERS[name]
    return Conv2dWorkload(batch, ci, h, h, co, k, k, s, s, k // 2, k // 2, bias, shift, relu)
