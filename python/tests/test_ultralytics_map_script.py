"""scripts/ultralytics-map.py's pure parts: the command line and its
defaults, the size split, mean ± sd and the table (no training here)."""

import contextlib
import importlib.util
import io
import os
import unittest

import _path

SCRIPT = os.path.join(_path.REPO, "scripts", "ultralytics-map.py")


def load():
    if not os.path.exists(SCRIPT):
        raise unittest.SkipTest(f"no {SCRIPT} (an installed package has no scripts)")
    spec = importlib.util.spec_from_file_location("ultralytics_map", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class UltralyticsMapScriptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = load()

    def test_defaults_follow_the_data_and_quick_mode(self):
        cases = [
            ([], dict(data="synth", images=200, val_images=200, epochs=20, imgsz=128, seed_list=[0, 1, 2], categories="all", size_split="terciles")),
            (["--quick"], dict(images=40, val_images=10, epochs=2, seed_list=[0], imgsz=128)),
            (["--quick", "--epochs", "5"], dict(epochs=5, seed_list=[0])),
            (["--data", "coco"], dict(images=16, val_images=0, imgsz=320, epochs=60, categories="person", size_split="32,96")),
            (["--data", "coco", "--quick"], dict(images=8, val_images=8, epochs=2)),
            (["--seeds", "4,7,9", "--loaders", "ultralytics,segpipe-ultralytics"], dict(seed_list=[4, 7, 9], loader_list=["ultralytics", "segpipe-ultralytics"])),
        ]
        for argv, want in cases:
            a = self.m.parse_args(argv)
            for k, v in want.items():
                self.assertEqual(getattr(a, k), v, f"{argv}: {k}")

    def test_bad_command_lines_are_refused(self):
        for argv in (
            ["--seeds", "1,1"],
            ["--seeds", "a"],
            ["--loaders", "segpipe-fuzzy"],
            ["--size-split", "96,32"],
            ["--copy-paste", "2"],
            ["--val-images", "0"],  # synth always scores held-out images
        ):
            with self.assertRaises(SystemExit, msg=str(argv)), contextlib.redirect_stderr(io.StringIO()):
                self.m.parse_args(argv)

    def test_size_split_is_pycocotools_area_ranges(self):
        self.assertEqual(self.m.area_ranges("32,96"), [[0.0, 1e10], [0.0, 1024.0], [1024.0, 9216.0], [9216.0, 1e10]])
        rng = self.m.area_ranges("10,20")
        coco = {"annotations": [{"area": 99}, {"area": 100}, {"area": 399}, {"area": 400}, {"area": 5, "iscrowd": 1}]}
        self.assertEqual(self.m.size_counts(coco, rng), {"small": 1, "medium": 2, "large": 1})
        split = self.m.tercile_split({"annotations": [{"area": v * v} for v in (10, 20, 30, 40, 50, 60)] + [{"area": 1, "iscrowd": 1}]})
        self.assertEqual(split, "30.00,50.00")
        thirds = {"annotations": [{"area": v * v} for v in range(1, 10)]}
        self.assertEqual(self.m.size_counts(thirds, self.m.area_ranges(self.m.tercile_split(thirds))), {"small": 3, "medium": 3, "large": 3})
        with self.assertRaises(ValueError):
            self.m.tercile_split({"annotations": [{"area": 4}] * 5})  # all one size: no split

    def test_mean_sd_is_the_sample_sd_of_the_figures_present(self):
        self.assertEqual(self.m.mean_sd([0.1, 0.2, 0.3]), {"mean": 0.2, "sd": 0.1, "n": 3, "runs": [0.1, 0.2, 0.3]})
        self.assertEqual(self.m.mean_sd([0.5, None]), {"mean": 0.5, "sd": None, "n": 1, "runs": [0.5]})
        self.assertIsNone(self.m.mean_sd([None, None]))

    def test_table_has_a_row_per_loader_in_loader_order(self):
        def run(loader, seed, v):
            last = {k: v for k, _ in self.m.METRICS}
            last["mask_ap_small"] = None
            return {"loader": loader, "seed": seed, "train_s": 1.0, "last": last}

        runs = [run("segpipe-exact", 0, 0.5), run("ultralytics", 0, 0.4), run("segpipe-exact", 1, 0.7), run("ultralytics", 1, 0.4)]
        s = self.m.summarise(runs)
        self.assertEqual(list(s), ["ultralytics", "segpipe-exact"])
        self.assertEqual(s["segpipe-exact"]["mask_map"]["mean"], 0.6)
        lines = self.m.table(s).splitlines()
        self.assertEqual(len(lines), 4)
        self.assertTrue(lines[2].startswith("ultralytics") and "0.400 ± 0.000" in lines[2], lines[2])
        self.assertIn("0.600 ± 0.141", lines[3])
        self.assertIn(" - ", lines[3] + " ")  # no small instance: no figure

    def test_loaders_follow_the_installed_table(self):
        full = {"copy_paste": "float", "mask_rule": "enum"}
        run, notes = self.m.plan_loaders(list(self.m.LOADERS), full, 0.5)
        self.assertEqual(run, [("ultralytics", None), ("segpipe-exact", "exact"), ("segpipe-ultralytics", "ultralytics")])
        self.assertEqual(notes, [])
        run, notes = self.m.plan_loaders(list(self.m.LOADERS), {"copy_paste": "float"}, 0.5)
        self.assertEqual(run, [("ultralytics", None), ("segpipe-exact", None)])
        self.assertEqual(len(notes), 2)
        with self.assertRaises(SystemExit):
            self.m.plan_loaders(["segpipe-exact"], {"mask_rule": "enum"}, 0.5)
        self.assertEqual(self.m.plan_loaders(["ultralytics"], {}, 0.5), ([("ultralytics", None)], []))


if __name__ == "__main__":
    unittest.main()
