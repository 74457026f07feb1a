"""Studies that check the measuring apparatus: they plant a truth and see whether it comes out.

* :mod:`~ap_gym.studies.injection`: known wrong rules and records in each design's memory,
  a scripted actor, the protocol's loop;
* :mod:`~ap_gym.studies.recovery`: the audit's estimators on simulated provenance with a
  known ground truth, and a confounded null;
* :mod:`~ap_gym.studies.supplied_skills`: the paper's §F.1, correct and wrong skills given
  to a no-memory agent on the same tasks.

They sit above the protocol and the report (they use both), like the CLI.
"""
