"""Recovery drills: inject a fault into a representative job on a live scheduler and verify,
from jobtrail's own timeline and incident, that it was detected and recovered from
(docs/drills.md)."""
