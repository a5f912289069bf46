import torch

from model import Model, get_init_inputs, get_inputs


def test_matches_definition():
    torch.manual_seed(0)
    m = Model(*get_init_inputs())
    (x,) = get_inputs()
    with torch.no_grad():
        expected = torch.clamp(x * m.scale + m.shift, min=0)
        torch.testing.assert_close(m(x), expected)


def test_negative_half_is_zero():
    m = Model(512)
    with torch.no_grad():
        m.shift.fill_(-1e6)
        assert torch.all(m(torch.randn(2048, 512)) == 0)
