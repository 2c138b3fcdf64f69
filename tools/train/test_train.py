"""Checks of the training side that run.sh does before it trains:
    /usr/bin/python3 -m unittest test_train     (from tools/train)
"""

import unittest

import torch

import bpe
from qwen35 import Config, Qwen35, gated_delta_chunked, gated_delta_recurrent, l2norm


def tiny_config():
    return Config(vocab_size=97, hidden_size=32, num_hidden_layers=4, intermediate_size=48,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                  linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8)


class GatedDelta(unittest.TestCase):
    def test_chunked_equals_the_per_token_recurrence(self):
        torch.manual_seed(0)
        for T, chunk in ((1, 64), (63, 64), (150, 64), (40, 16)):
            B, H, Dk, Dv = 2, 3, 8, 12
            q = l2norm(torch.randn(B, T, H, Dk, dtype=torch.float64)) / Dk ** 0.5
            k = l2norm(torch.randn(B, T, H, Dk, dtype=torch.float64))
            v = torch.randn(B, T, H, Dv, dtype=torch.float64)
            g = -torch.rand(B, T, H, dtype=torch.float64) * 4
            beta = torch.rand(B, T, H, dtype=torch.float64)
            o1, s1 = gated_delta_recurrent(q, k, v, g, beta)
            o2, s2 = gated_delta_chunked(q, k, v, g, beta, chunk=chunk)
            self.assertLess((o1 - o2).abs().max().item(), 1e-10, (T, chunk))
            self.assertLess((s1 - s2).abs().max().item(), 1e-10, (T, chunk))

    def test_model_forward_is_the_same_with_either_form(self):
        torch.manual_seed(1)
        m = Qwen35(tiny_config()).double()
        x = torch.randint(0, 97, (2, 70))
        a = m.hidden(x)
        for layer in m.layers:
            if layer.kind != "full_attention":
                layer.linear_attn.chunked = False
        self.assertLess((a - m.hidden(x)).abs().max().item(), 1e-10)


class MTP(unittest.TestCase):
    def test_second_step_mask_is_what_drafting_sees(self):
        """Row r of mtp_second_step = one draft row at position r + 1 that
        attends to the step-1 rows 0..r and itself (acceptance.drafts)."""
        torch.manual_seed(2)
        m = Qwen35(tiny_config()).double()
        for p in m.parameters():                      # leave the zero init: make norms matter
            p.data += 0.05 * torch.randn_like(p)
        x = torch.randint(0, 97, (1, 20))
        h = m.hidden(x[:, :18])
        m1, kv1 = m.mtp_teacher_forced(h, x[:, 1:19])
        m2 = m.mtp_second_step(m1[:, :17], (kv1[0][:, :17], kv1[1][:, :17]), x[:, 2:19])
        for r in (0, 5, 16):
            row = m.mtp.layer_input(m.embed_tokens(x[:, r + 2:r + 3]), m1[:, r:r + 1])
            one, _ = m.mtp.run(row, torch.tensor([r + 1]), past=(kv1[0][:, :r + 1], kv1[1][:, :r + 1]))
            self.assertLess((one[0, 0] - m2[0, r]).abs().max().item(), 1e-10, r)

    def test_teacher_forced_rows_do_not_see_the_future(self):
        torch.manual_seed(3)
        m = Qwen35(tiny_config()).double()
        x = torch.randint(0, 97, (1, 12))
        h = m.hidden(x[:, :11])
        full, _ = m.mtp_teacher_forced(h, x[:, 1:12])
        part, _ = m.mtp_teacher_forced(h[:, :6], x[:, 1:7])
        self.assertLess((full[:, :6] - part).abs().max().item(), 1e-10)


class BPE(unittest.TestCase):
    TEXT = ("And God said, Let there be light: and there was light.\n"
            "And God saw the light, that it was good.\n") * 20 + "Café naïve 123 'tis\n"

    def test_encode_covers_the_text_and_merges_help(self):
        vocab, merges = bpe.train(self.TEXT, 30)
        self.assertEqual(len(merges), 30)
        enc = bpe.Encoder(vocab, merges)
        ids = enc.encode(self.TEXT)
        inverse = {v: k for k, v in vocab.items()}
        byte_of = {c: b for b, c in bpe.BYTE_CHAR.items()}
        decoded = bytes(byte_of[c] for i in ids for c in inverse[i]).decode("utf-8")
        self.assertEqual(decoded, self.TEXT)
        self.assertLess(len(ids), len(self.TEXT.encode()) / 2)

    def test_digits_split_one_per_piece(self):
        self.assertEqual([p for p in bpe.pieces("x 2024") if p.strip("Ġ")][-4:], ["2", "0", "2", "4"])


if __name__ == "__main__":
    unittest.main()
