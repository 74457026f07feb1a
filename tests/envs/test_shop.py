from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import ap_gym
from ap_gym.envs.shop import CATEGORIES, Goal, Product, ShopEnv, catalog, goals, shop_reward
from ap_gym.errors import APGymError
from ap_gym.policies import WalkthroughPolicy

GOAL = Goal("i need waterproof lightweight hiking boots, size: 9, color: black, price lower than 80.00 dollars",
            "B0X", "footwear", "hiking boots", ("lightweight", "waterproof"), {"color": "black", "size": "9"}, 80.0)


def product(**kw):
    base = dict(asin="B0X", title="t", category="footwear", product_type="hiking boots",
                attributes=("lightweight", "waterproof", "leather"), options={"size": ("8", "9"), "color": ("black",)},
                price=60.0, description="d", features=())
    return Product(**{**base, **kw})


@pytest.mark.parametrize(
    ("p", "selected", "expected"),
    [
        (product(), {"size": "9", "color": "black"}, 1.0),
        (product(attributes=("waterproof",)), {"size": "9", "color": "black"}, 4 / 5),  # one attribute missing
        (product(), {"size": "8", "color": "black"}, 4 / 5),  # wrong option
        (product(), {"color": "black"}, 4 / 5),  # option not chosen
        (product(price=95.0), {"size": "9", "color": "black"}, 4 / 5),  # over the price bound
        (product(product_type="sandals"), {"size": "9", "color": "black"}, 0.5),  # same category, other type
        (product(category="audio", product_type="soundbar"), {"size": "9", "color": "black"}, 0.0),
        (product(attributes=(), price=99.0), {}, 0.0),
    ],
)
def test_reward_hand_computed(p, selected, expected):
    assert shop_reward(GOAL, p, selected) == pytest.approx(expected)


def test_catalog_and_instructions():
    products = catalog()
    assert len(products) >= 1000 and len({p.category for p in products}) >= 5 == min(5, len(CATEGORIES))
    assert len({p.asin for p in products}) == len(products)
    assert catalog() is catalog() and goals()[0] == goals()[0]
    env = ShopEnv()
    train, test = env.task_ids("train"), env.task_ids("test")
    assert len(train) == 200 and len(test) == 100 and not set(train) & set(test)
    g = env.goal(test[0])
    assert "price lower than" in g.instruction and g.instruction.startswith(("i ", "find"))


def test_check_env():
    check_env(ShopEnv(split="test"), skip_render_check=True)


def test_oracle_wins_every_held_out_instruction_and_random_does_not():
    env = gym.make("ap_gym/Shop-v0", split="test")
    rewards = [ap_gym.run_episode(env, WalkthroughPolicy(), task_id=t).score for t in env.unwrapped.task_ids("test")]
    assert rewards == [100.0] * 100
    rand = ap_gym.run_episode(env, ap_gym.policies.RandomPolicy(seed=0), task_id=env.unwrapped.task_ids("test")[0])
    assert not rand.success


def test_malformed_actions_return_the_same_page():
    env = ShopEnv(split="test")
    obs, info = env.reset(options={"task_id": env.task_ids("test")[0]})
    for action, message in [("click[nothing here]", "Invalid click"), ("search[]", "Empty search"),
                            ("search[boots", "Invalid action"), ("click[[x]]", "Invalid action"), ("dance", "Invalid action")]:
        text, reward, term, trunc, _ = env.step(action)
        assert text.startswith(message) and obs in text and reward == 0 and not term
    text, *_ = env.step("search[hiking boots]")
    assert "Total results" in text
    text, *_ = env.step("search[more boots]")
    assert "no search bar" in text


def test_official_webshop_says_how_to_install():
    with pytest.raises(APGymError, match="setup.sh.*Shop-v0"):
        gym.make("ap_gym/WebShop-v0")


def test_no_held_out_target_product_is_a_training_target():
    env = ShopEnv()
    held = {env.goal(t).asin for t in env.task_ids("test")}
    train = [env.goal(t).asin for t in env.task_ids("train")]
    assert len(train) == 200 and not held & set(train)


def test_official_webshop_split_stays_inside_webshops_own():
    """Held-out: WebShop's test goals 0-99; training: only its training goals (index 1500 on),
    never one whose product a held-out goal targets, so no test goal is ever a training goal."""
    from ap_gym.envs.webshop import WEBSHOP_TEST, WEBSHOP_TRAIN_FROM, webshop_split

    goals = [{"asin": f"B{i % 1700:05d}"} for i in range(6000)]  # asins repeat: 1500+i shares i's product
    split = webshop_split(goals, split_seed=3)
    assert split["test"] == list(range(100)) and len(split["train"]) == 200
    assert all(i >= WEBSHOP_TRAIN_FROM and i not in WEBSHOP_TEST for i in split["train"])
    held = {goals[i]["asin"] for i in split["test"]}
    assert not held & {goals[i]["asin"] for i in split["train"]}
    assert webshop_split(goals, split_seed=3) == split != webshop_split(goals, split_seed=4)


def test_no_held_out_goal_can_be_won_by_buying_a_training_target():
    """44 of the 100 held-out goals could be won by a training instruction's target product:
    memory could copy a winning product id."""
    from ap_gym.envs.shop import wins

    env = ShopEnv()
    targets = {env.goal(t).asin for t in env.task_ids("train")}
    assert not [t for t in env.task_ids("test") if any(wins(env.goal(t), env.by_asin[a]) for a in targets)]
    assert len(env.task_ids("train")) == 200 and len(env.task_ids("test")) == 100


def test_optionless_categories_name_no_option_and_leave_the_rest():
    plain, study = ShopEnv(), ShopEnv(optionless=("grocery", "kitchen"))
    assert plain.task_ids("test") == study.task_ids("test")
    for t in study.task_ids("test"):
        goal, other = study.goal(t), plain.goal(t)
        if goal.category in ("grocery", "kitchen"):
            assert goal.options == {} and "and price lower" in goal.instruction
        else:
            assert goal == other
