"""ctgscore: distributed batch scoring and meta-evaluation for controllable text generation."""

__version__ = "0.1.0"
