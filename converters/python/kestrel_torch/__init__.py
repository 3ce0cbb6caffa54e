"""PyTorch side of the Kestrel converter: reference modules for every mechanism Kestrel fuses
(:mod:`kestrel_torch.mechanisms`), the benchmark model builders (:mod:`kestrel_torch.models`)
and the ONNX fixture export (:mod:`kestrel_torch.export`)."""

from .mechanisms import AftConv, AftFull, AftLocal, AftSimple, Attention, AttentionVariant, Fastformer

__all__ = ["Attention", "AttentionVariant", "AftFull", "AftLocal", "AftSimple", "AftConv", "Fastformer"]
