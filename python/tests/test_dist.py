"""Rank and world size defaults, with a stand-in for torch.distributed."""

import unittest

import _path  # noqa: F401
from segpipe.dist import rank_and_world
from segpipe.request import RequestError


class FakeDist:
    def __init__(self, rank, world, initialized=True, available=True):
        self.rank, self.world, self.initialized, self.available = rank, world, initialized, available

    def is_available(self):
        return self.available

    def is_initialized(self):
        return self.initialized

    def get_rank(self):
        return self.rank

    def get_world_size(self):
        return self.world


class RankAndWorldTest(unittest.TestCase):
    def test_defaults_to_rank_0_of_1(self):
        self.assertEqual(rank_and_world(dist=None, environ={}), (0, 1))
        self.assertEqual(rank_and_world(dist=FakeDist(3, 4, initialized=False), environ={}), (0, 1))
        self.assertEqual(rank_and_world(dist=FakeDist(3, 4, available=False), environ={}), (0, 1))

    def test_takes_the_initialised_process_group(self):
        env = {"RANK": "0", "WORLD_SIZE": "2"}  # the group wins over the environment
        self.assertEqual(rank_and_world(dist=FakeDist(3, 4), environ=env), (3, 4))

    def test_takes_torchrun_variables_before_the_group_exists(self):
        self.assertEqual(rank_and_world(dist=FakeDist(0, 1, initialized=False), environ={"RANK": "1", "WORLD_SIZE": "2"}), (1, 2))

    def test_explicit_values_win(self):
        self.assertEqual(rank_and_world(1, 2, dist=FakeDist(3, 4), environ={}), (1, 2))
        self.assertEqual(rank_and_world(rank=2, dist=FakeDist(3, 4), environ={}), (2, 4))
        self.assertEqual(rank_and_world(world_size=8, dist=None, environ={"RANK": "5", "WORLD_SIZE": "6"}), (5, 8))

    def test_refuses_what_cannot_be_a_rank(self):
        for kw, env, want in [
            (dict(rank=4), {}, "rank 4 of world_size 1"),
            (dict(rank=-1, world_size=2), {}, "rank -1"),
            (dict(world_size=0), {}, "world_size 0"),
            (dict(rank=True), {}, "rank True"),
            ({}, {"RANK": "1"}, "together"),
            ({}, {"RANK": "x", "WORLD_SIZE": "2"}, "integers"),
            (dict(world_size=2), {"RANK": "3", "WORLD_SIZE": "4"}, "rank 3 of world_size 2"),
        ]:
            with self.subTest(kw=kw, env=env):
                with self.assertRaises(RequestError) as cm:
                    rank_and_world(dist=None, environ=env, **kw)
                self.assertIn(want, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
