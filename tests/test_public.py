"""The package's public face: the names a user extends ap-gym with, pinned."""

from __future__ import annotations

import subprocess
import sys

import ap_gym

PUBLIC = ["APGymError", "AgentConfig", "BackboneError", "BasePolicy", "EnvInfrastructureError", "Episode", "Grammar",
          "InfrastructureError", "Policy", "PolicySpec", "PromptRejected", "RunConfig", "StartResult",
          "StatefulPolicy", "Step", "StepResult", "StepTrace", "Termination", "TextEnv", "UnknownTaskError", "Usage",
          "__version__", "make_vec", "register_design", "register_policy", "run_episode", "run_episodes"]


def test_the_public_names_are_pinned_and_each_resolves():
    assert sorted(ap_gym.__all__) == sorted(PUBLIC), "ap_gym.__all__ changed: update PUBLIC and the README"
    for name in PUBLIC:
        assert getattr(ap_gym, name) is not None
    from ap_gym.policies import register_design, register_policy
    from ap_gym.protocol import RunConfig

    assert (ap_gym.register_design, ap_gym.register_policy, ap_gym.RunConfig) == (register_design, register_policy,
                                                                                 RunConfig)


def test_importing_the_package_loads_no_policy_and_no_runner():
    code = ("import sys, ap_gym; print(sorted(m for m in sys.modules if m.startswith(('ap_gym.policies', "
            "'ap_gym.protocol', 'ap_gym.backbones.hf', 'torch'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
