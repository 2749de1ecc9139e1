"""Errors a pipeline raises: each carries a one-line reason for the user."""


class PipelineError(Exception):
    """A model could not be turned into a verified artifact; str(err) is the one-line reason."""


class IntakeError(PipelineError):
    """The ONNX file (or its sidecar) is unusable as given."""


class VerificationError(PipelineError):
    """The built library's outputs do not match onnxruntime within tolerance."""
