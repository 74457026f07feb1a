import gymnasium as gym

import ap_gym
from ap_gym.policies import WalkthroughPolicy

env = gym.make("ap_gym/TextWorld-v0", split="test")      # 50-step limit by default
task = env.unwrapped.task_ids("test")[0]
episode = ap_gym.run_episode(env, WalkthroughPolicy(), task_id=task, seed=0)
print(episode.summary_line())                              # success, score, steps, LLM calls
print(episode.steps[0].action, "->", episode.steps[0].observation[:80])
env.close()
