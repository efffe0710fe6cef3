"""Format strings reach attributes and items by name at run time, where the static check
cannot see them: the sandbox checks every template before str.format uses it."""

from __future__ import annotations

import pytest

from coinfer import sandbox
from coinfer.errors import SandboxError


@pytest.mark.parametrize(
    "code",
    [
        "def f(): pass\nresult = '{0.__globals__}'.format(f)",  # the sandbox's globals and builtins
        "result = '{0.__class__.__base__.__subclasses__}'.format(())",  # object.__subclasses__
        "result = '{a.__class__}'.format_map({'a': 1})",
        "result = str.format('{0.__class__}', 1)",  # unbound
        "f = str.format\nresult = f('{0.__globals__}', print)",  # kept for later
        "result = list(map('{0.__class__}'.format, [1]))",  # passed on as a bound method
        "result = '{0:{1.__class__}}'.format(1, 2)",  # a field nested in the format spec
        "result = '{0[_secret]}'.format({'_secret': 1})",  # an item
        "s = '{0.' + '_' * 2 + 'globals__}'\ndef f(): pass\nresult = s.format(f)",  # built at run time
        "class S(str):\n    def f(self):\n        return super().format(len)\nresult = S('{0.__self__}').f()",
        "result = type('')('{0.__class__}').format(1)",  # the str type reached through type()
    ],
)
def test_a_template_that_reaches_a_private_name_is_refused_and_leaks_nothing(code: str) -> None:
    with pytest.raises(SandboxError, match="sandbox does not allow") as err:
        sandbox.run(code)
    assert err.value.kind == "error"
    assert "<" not in str(err.value) and "builtins" not in str(err.value)  # no object's repr came back


def test_ordinary_formatting_still_works() -> None:
    code = (
        "class Point:\n    def __init__(self, x):\n        self.x = x\n"
        "result = ['{:.2f} {name}'.format(3.14159, name='a'), '{0[1]}'.format([5, 6]),\n"
        "          '{p.x}'.format(p=Point(7)), '{k}'.format_map({'k': 8}), str.format('{}!', 9),\n"
        "          f'{10:>3}', '%(k)s' % {'k': 11}]"
    )
    assert sandbox.run(code).value == ["3.14 a", "6", "7", "8", "9!", " 10", "11"]


def test_a_format_method_of_the_codes_own_class_is_its_own() -> None:
    code = "class Report:\n    def format(self, n):\n        return f'n={n}'\nresult = Report().format(3)"
    assert sandbox.run(code).value == "n=3"
