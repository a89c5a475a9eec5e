-- CreateTable
CREATE TABLE "Budget" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "scope" TEXT NOT NULL,
    "scopeId" TEXT,
    "tokens" BIGINT,
    "micros" BIGINT,
    "period" TEXT NOT NULL DEFAULT 'none',
    "timezone" TEXT NOT NULL DEFAULT 'UTC',
    "windowSeconds" INTEGER,
    "source" TEXT NOT NULL DEFAULT 'api',
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL
);

-- CreateTable
CREATE TABLE "BudgetUsage" (
    "budgetId" TEXT NOT NULL,
    "periodStart" DATETIME NOT NULL,
    "periodEnd" DATETIME,
    "usedTokens" BIGINT NOT NULL DEFAULT 0,
    "reservedTokens" BIGINT NOT NULL DEFAULT 0,
    "usedMicros" BIGINT NOT NULL DEFAULT 0,
    "reservedMicros" BIGINT NOT NULL DEFAULT 0,

    PRIMARY KEY ("budgetId", "periodStart"),
    CONSTRAINT "BudgetUsage_budgetId_fkey" FOREIGN KEY ("budgetId") REFERENCES "Budget" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "BudgetReservation" (
    "key" TEXT NOT NULL PRIMARY KEY,
    "model" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "tokens" BIGINT NOT NULL,
    "micros" BIGINT,
    "holds" TEXT NOT NULL,
    "expiresAt" DATETIME NOT NULL,
    "settledAt" DATETIME,
    "settledTokens" BIGINT,
    "settledMicros" BIGINT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- CreateIndex
CREATE INDEX "Budget_scope_scopeId_idx" ON "Budget"("scope", "scopeId");

-- CreateIndex
CREATE INDEX "BudgetReservation_settledAt_expiresAt_idx" ON "BudgetReservation"("settledAt", "expiresAt");

