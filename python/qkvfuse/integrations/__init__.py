# SPDX-License-Identifier: Apache-2.0
"""Integrations of qkvfuse into other libraries' models: ``transformers``."""
