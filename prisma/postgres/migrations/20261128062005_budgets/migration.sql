-- CreateTable
CREATE TABLE "Budget" (
    "id" TEXT NOT NULL,
    "scope" TEXT NOT NULL,
    "scopeId" TEXT,
    "tokens" BIGINT,
    "micros" BIGINT,
    "period" TEXT NOT NULL DEFAULT 'none',
    "timezone" TEXT NOT NULL DEFAULT 'UTC',
    "windowSeconds" INTEGER,
    "source" TEXT NOT NULL DEFAULT 'api',
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Budget_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "BudgetUsage" (
    "budgetId" TEXT NOT NULL,
    "periodStart" TIMESTAMP(3) NOT NULL,
    "periodEnd" TIMESTAMP(3),
    "usedTokens" BIGINT NOT NULL DEFAULT 0,
    "reservedTokens" BIGINT NOT NULL DEFAULT 0,
    "usedMicros" BIGINT NOT NULL DEFAULT 0,
    "reservedMicros" BIGINT NOT NULL DEFAULT 0,

    CONSTRAINT "BudgetUsage_pkey" PRIMARY KEY ("budgetId","periodStart")
);

-- CreateTable
CREATE TABLE "BudgetReservation" (
    "key" TEXT NOT NULL,
    "model" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "tokens" BIGINT NOT NULL,
    "micros" BIGINT,
    "holds" TEXT NOT NULL,
    "expiresAt" TIMESTAMP(3) NOT NULL,
    "settledAt" TIMESTAMP(3),
    "settledTokens" BIGINT,
    "settledMicros" BIGINT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "BudgetReservation_pkey" PRIMARY KEY ("key")
);

-- CreateIndex
CREATE INDEX "Budget_scope_scopeId_idx" ON "Budget"("scope", "scopeId");

-- CreateIndex
CREATE INDEX "BudgetReservation_settledAt_expiresAt_idx" ON "BudgetReservation"("settledAt", "expiresAt");

-- AddForeignKey
ALTER TABLE "BudgetUsage" ADD CONSTRAINT "BudgetUsage_budgetId_fkey" FOREIGN KEY ("budgetId") REFERENCES "Budget"("id") ON DELETE CASCADE ON UPDATE CASCADE;

