"""coinfer: collaborative inference between language models of different sizes."""

from coinfer.errors import CoinferError

__version__ = "0.1.0"
__all__ = ["CoinferError", "__version__"]
