"""jobtrail: one cross-system timeline per training job, and the incidents that explain it."""

__version__ = "0.1.0"
